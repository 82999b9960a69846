package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// quotaRequestCmds are `atoll quota request|requests|approve|reject`.
func quotaRequestCmds(g *globals) []*cobra.Command {
	return []*cobra.Command{quotaRequestCmd(g), quotaRequestsCmd(g), quotaDecideCmd(g, true), quotaDecideCmd(g, false)}
}

func quotaRequestCmd(g *globals) *cobra.Command {
	var (
		req        computeapi.QuotaRequestCreate
		gpus, pods int64
	)
	cmd := &cobra.Command{
		Use:   "request -p PROJECT --tier TIER [--cpu C] [--memory M] [--storage S] [--gpus G] [--pods P] --reason TEXT",
		Short: "Ask a platform admin for a tier's limits to change (project admins)",
		Long: `request files a request for the project's limits of one tier: the amounts
given become the tier's caps once a platform admin approves, the others stay
as they are. It waits, pending, until approved ('atoll quota approve') or
rejected with a reason; 'atoll quota requests -p PROJECT' shows the outcome.`,
		Example: `  atoll quota request -p web --tier OnDemand --cpu 64 --memory 256Gi --reason "launch"`,
		Args:    cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			project, err := t.needProject()
			if err != nil {
				return err
			}
			if req.Tier != "" {
				if req.Tier, err = canonicalTier(req.Tier); err != nil {
					return fmt.Errorf("--tier: %w", err)
				}
			}
			if cmd.Flags().Changed("gpus") {
				req.Gpus = &gpus
			}
			if cmd.Flags().Changed("pods") {
				req.Pods = &pods
			}
			out, err := c.RequestQuota(ctx, project, req)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "quota request %s filed: %s %s, pending\n", out.Id, out.Tier, limitText(out.Limit))
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Tier, "tier", "", "the tier: Reserved, OnDemand or Preemptible")
	f.StringVar(&req.Cpu, "cpu", "", "CPU cap in cores (64, 500m)")
	f.StringVar(&req.Memory, "memory", "", "memory cap (256Gi)")
	f.StringVar(&req.Storage, "storage", "", "storage cap (1Ti)")
	f.Int64Var(&gpus, "gpus", 0, "GPU cap")
	f.Int64Var(&pods, "pods", 0, "pod cap")
	f.StringVar(&req.Reason, "reason", "", "why the project needs it (required)")
	return cmd
}

func quotaRequestsCmd(g *globals) *cobra.Command {
	var (
		state string
		all   bool
	)
	cmd := &cobra.Command{
		Use:   "requests [-p PROJECT | --all-projects] [--state pending|approving|approved|rejected]",
		Short: "List quota requests: a project's, or every project's (platform admins)",
		Long: `requests lists quota requests, oldest first, with their state, who asked,
who decided and why. With a project (-p, ATOLL_PROJECT or the login's) it
lists that project's; without one, or with --all-projects, every project's,
which platform admins review ('--state pending' is the queue).`,
		Example: `  atoll quota requests --state pending
  atoll quota requests -p web`,
		Args: cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			project := t.project
			if all {
				project = ""
			}
			items, err := c.QuotaRequests(ctx, project, strings.ToLower(state))
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, items)
			}
			printQuotaRequests(cmd.OutOrStdout(), items, time.Now())
			return nil
		}),
	}
	cmd.Flags().StringVar(&state, "state", "", "only requests in this state: pending, approving, approved, rejected")
	cmd.Flags().BoolVar(&all, "all-projects", false, "every project's requests (platform admins), whatever the project configured")
	return cmd
}

func quotaDecideCmd(g *globals, approve bool) *cobra.Command {
	var reason string
	use, short, long := "approve ID [--reason TEXT]", "Approve a quota request, applying its limits (platform admins)",
		`approve applies the request's limits to its project and marks it approved,
as one step: an approval cut short (a crash, a lost reply) is finished by
running approve again, and its limits are applied once. A request decided
already is refused (409).`
	if !approve {
		use, short, long = "reject ID --reason TEXT", "Reject a quota request with a reason (platform admins)",
			`reject marks the request rejected with your reason; the project's quota
does not change. A request decided already is refused (409).`
	}
	verb := strings.Fields(use)[0]
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: fmt.Sprintf("  atoll quota %s web-1 --reason %q", verb, map[bool]string{true: "ok for the launch", false: "not this quarter"}[approve]),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, _ target) error {
				decide := c.RejectQuotaRequest
				if approve {
					decide = c.ApproveQuotaRequest
				}
				out, err := decide(ctx, args[0], reason)
				if err != nil {
					return err
				}
				if g.output != "table" {
					return printData(cmd.OutOrStdout(), g.output, out)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "quota request %s %s\n", out.Id, out.State)
				return nil
			})(cmd, args)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required to reject)")
	return cmd
}

// printQuotaRequests writes requests as a table.
func printQuotaRequests(w io.Writer, items []computeapi.QuotaRequest, now time.Time) {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tPROJECT\tTIER\tLIMITS\tSTATE\tREQUESTER\tREVIEWER\tREASON\tDECISION\tAGE")
	for _, q := range items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", q.Id, q.Project, q.Tier, limitText(q.Limit), q.State, q.Requester,
			dash(q.Reviewer), dash(q.Reason), dash(q.Decision), age(q.Created, now))
	}
	_ = tw.Flush()
}

// limitText writes the amounts a limit sets: cpu=64,memory=256Gi.
func limitText(l computeapi.QuotaLimit) string {
	var parts []string
	add := func(name string, v *int64, format func(int64) string) {
		if v != nil {
			parts = append(parts, name+"="+format(*v))
		}
	}
	add("cpu", l.MilliCPU, cpu)
	add("memory", l.MemoryBytes, mem)
	add("storage", l.StorageBytes, mem)
	add("gpus", l.Gpus, func(n int64) string { return fmt.Sprint(n) })
	add("pods", l.Pods, func(n int64) string { return fmt.Sprint(n) })
	return dash(strings.Join(parts, ","))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
