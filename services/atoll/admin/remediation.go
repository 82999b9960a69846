package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// remediationCmd is `atoll-admin remediation status|pause|resume`: an
// operator's command, like bootstrap, connected to the region's NATS as
// the admin user (the remediation endpoints answer the admin and the
// gateway).
func remediationCmd() *cobra.Command {
	var (
		url, creds, ca string
		output         string
		wait           time.Duration
	)
	// connect runs fn with a requester on the region's NATS.
	connect := func(cmd *cobra.Command, fn func(ctx context.Context, r *bus.Requester) error) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), wait)
		defer cancel()
		b, err := bus.Open(ctx, bus.Config{URL: url, Name: "atoll-remediation-cli", SkipEnsure: true}.WithCredentials(creds).WithCA(ca))
		if err != nil {
			return err
		}
		defer b.Close()
		return fn(ctx, bus.NewRequester(b.NC, bus.RequestPolicy{}))
	}
	cmd := &cobra.Command{
		Use:   "remediation",
		Short: "Node remediation: status per cluster, pause and resume (operators, over NATS)",
		Long: `Remediation shows, per member cluster, the unhealthy nodes, what the
remediation service does to each and why, the storm breakers, the
disruption leases and each node's history; pause stops new actions in a
cluster (--cluster) or the whole region, resume lifts that pause
(escalations already running go on). It talks to the region's NATS as the
admin user, as bootstrap does.`,
		Example: `  atoll-admin remediation status --cluster zone-a
  atoll-admin remediation pause --cluster zone-b --reason "network maintenance"
  atoll-admin remediation resume --cluster zone-b`,
	}
	var cluster, reason string
	status := &cobra.Command{
		Use: "status", Short: "Unhealthy nodes, actions, breakers and history per cluster", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list []api.RemediationClusterStatus
			err := connect(cmd, func(ctx context.Context, r *bus.Requester) (err error) {
				list, err = bus.RemediationStatus.Call(ctx, r, api.RemediationStatusRequest{Cluster: cluster})
				return err
			})
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			printRemediation(cmd.OutOrStdout(), list)
			return nil
		},
	}
	status.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	pause := &cobra.Command{
		Use: "pause", Short: "Stop new actions in a cluster, or the region without --cluster", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := connect(cmd, func(ctx context.Context, r *bus.Requester) error {
				return bus.RemediationPause.Send(ctx, r, api.RemediationPauseRequest{Cluster: cluster, Reason: reason, By: os.Getenv("USER")})
			})
			if err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "remediation paused in %s\n", scopeName(cluster))
			}
			return err
		},
	}
	pause.Flags().StringVar(&reason, "reason", "", "why, shown in the status")
	resume := &cobra.Command{
		Use: "resume", Short: "Lift a pause", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := connect(cmd, func(ctx context.Context, r *bus.Requester) error {
				return bus.RemediationResume.Send(ctx, r, api.RemediationPauseRequest{Cluster: cluster, By: os.Getenv("USER")})
			})
			if err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "remediation resumed in %s\n", scopeName(cluster))
			}
			return err
		},
	}
	f := cmd.PersistentFlags()
	f.StringVar(&url, "nats", envOr(EnvNATSURL, "nats://127.0.0.1:4222"), "NATS server URLs, comma-separated ($"+EnvNATSURL+")")
	f.StringVar(&creds, "creds", os.Getenv(EnvNATSCreds), "the admin user's credentials file ($"+EnvNATSCreds+")")
	f.StringVar(&ca, "nats-ca", os.Getenv(bus.EnvCAFile), "PEM CA file to verify the NATS servers with, over TLS ($"+bus.EnvCAFile+")")
	f.DurationVar(&wait, "wait", 15*time.Second, "deadline of the command")
	f.StringVar(&cluster, "cluster", "", "member cluster (default: every cluster, or the region for pause and resume)")
	cmd.AddCommand(status, pause, resume)
	return cmd
}

func scopeName(cluster string) string {
	if cluster == "" {
		return "the region"
	}
	return "cluster " + cluster
}

// printRemediation writes the status as tables: one block per cluster.
func printRemediation(w io.Writer, list []api.RemediationClusterStatus) {
	for i, c := range list {
		if i > 0 {
			fmt.Fprintln(w)
		}
		state := "reachable"
		if !c.Reachable {
			state = "UNREACHABLE (no action)"
		}
		fmt.Fprintf(w, "CLUSTER %s  %s", c.Cluster, state)
		if c.Paused != "" {
			fmt.Fprintf(w, "  %s", c.Paused)
		}
		fmt.Fprintln(w)
		for _, b := range c.Breakers {
			if b.Open {
				s := "OPEN"
				if !b.CoolingUntil.IsZero() {
					s = "cooling until " + b.CoolingUntil.Format(time.TimeOnly)
				}
				fmt.Fprintf(w, "  breaker %s %s: %d of %d unhealthy, at most %d\n", b.Domain, s, b.Unhealthy, b.Total, b.Allowed)
			}
		}
		for _, l := range c.Leases {
			fmt.Fprintf(w, "  lease %s: %s (%s) until %s\n", l.Node, l.Owner, l.Reason, l.Expires.Format(time.TimeOnly))
		}
		if len(c.Nodes) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NODE\tPOOL\tPHASE\tSIGNAL\tSINCE\tWHY / LAST EVENT")
		for _, n := range c.Nodes {
			why := n.Waiting
			if why == "" && len(n.History) > 0 {
				e := n.History[len(n.History)-1]
				why = strings.TrimSpace(e.Event + " " + e.Message)
			}
			since := ""
			if !n.UnhealthySince.IsZero() {
				since = time.Since(n.UnhealthySince).Round(time.Second).String()
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", n.Node, n.Pool, n.Phase, n.Signal, since, why)
		}
		_ = tw.Flush()
	}
}
