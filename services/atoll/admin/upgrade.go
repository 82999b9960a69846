package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"atoll.dev/libs/bus"
	"atoll.dev/services/upgrade"
	"atoll.dev/services/upgrade/plan"
)

// upgradeCmd is `atoll-admin upgrade plan|status|pause|resume|abort`: an
// operator's command connected to the region's NATS as the admin user.
// Plans and their controls are KV writes (bucket upgrade), so a pause
// given while the upgrade service is down waits there for its next term.
func upgradeCmd() *cobra.Command {
	var (
		url, creds, ca string
		wait           time.Duration
		reason         string
		output         string
		file           string
	)
	withKV := func(cmd *cobra.Command, fn func(ctx context.Context, kv jetstream.KeyValue) error) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), wait)
		defer cancel()
		b, err := bus.Open(ctx, bus.Config{URL: url, Name: "atoll-upgrade-cli", SkipEnsure: true}.WithCredentials(creds).WithCA(ca))
		if err != nil {
			return err
		}
		defer b.Close()
		kv, err := b.KV(ctx, bus.BucketUpgrade)
		if err != nil {
			return err
		}
		return fn(ctx, kv)
	}
	control := func(name string, change func(c *plan.Control)) func(cmd *cobra.Command, args []string) error {
		return func(cmd *cobra.Command, args []string) error {
			return withKV(cmd, func(ctx context.Context, kv jetstream.KeyValue) error {
				if _, err := kv.Get(ctx, upgrade.SpecKey(args[0])); err != nil {
					return fmt.Errorf("plan %s: %w", args[0], err)
				}
				_, err := bus.Update(ctx, kv, upgrade.ControlKey(args[0]), func(cur []byte, exists bool) ([]byte, error) {
					var c plan.Control
					if exists {
						if err := json.Unmarshal(cur, &c); err != nil {
							return nil, err
						}
					}
					change(&c)
					return json.Marshal(c)
				})
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "plan %s: %s requested\n", args[0], name)
				}
				return err
			})
		}
	}
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Node rotation plans: plan, status, pause, resume, abort (platform admins, over NATS)",
		Long: `Upgrade rotates the member clusters' nodes to a new version label: a plan
lists the clusters in order (the first is the canary), the pools of each
and their waves (maxUnavailable rounds down but never below one, maxSurge
rounds up), the soak after each wave, maintenance windows with a time
zone, the drain deadline and its policy (skip, force, pause). The SLO gate
pauses a plan on its own; resume lifts any pause, abort rolls back what
is in flight (uncordons the nodes not drained yet). It talks to the
region's NATS as the admin user, as bootstrap does.`,
		Example: `  atoll-admin upgrade plan -f deploy/examples/rotation.yaml
  atoll-admin upgrade status v2
  atoll-admin upgrade pause v2 --reason "incident 42"
  atoll-admin upgrade resume v2
  atoll-admin upgrade abort v2`,
	}
	planCmd := &cobra.Command{
		Use: "plan -f FILE", Short: "Store a rotation plan (YAML or JSON), validated", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := os.ReadFile(file) //nolint:gosec // G304: the plan file the operator named with -f
			if err != nil {
				return err
			}
			var s plan.Spec
			if err := yaml.UnmarshalStrict(raw, &s); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			s.Default()
			if err := s.Validate(); err != nil {
				return fmt.Errorf("%s: invalid plan:\n%w", file, err)
			}
			b, _ := json.Marshal(s)
			return withKV(cmd, func(ctx context.Context, kv jetstream.KeyValue) error {
				if _, err := kv.Put(ctx, upgrade.SpecKey(s.Name), b); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "plan %s stored: %d clusters, %s=%s\n", s.Name, len(s.Clusters), s.Target.Label, s.Target.Value)
				return nil
			})
		},
	}
	planCmd.Flags().StringVarP(&file, "file", "f", "", "the plan")
	_ = planCmd.MarkFlagRequired("file")
	status := &cobra.Command{
		Use: "status [PLAN]", Short: "Progress per cluster, pool and wave, with the reason of any pause", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withKV(cmd, func(ctx context.Context, kv jetstream.KeyValue) error {
				names, err := planNames(ctx, kv, args)
				if err != nil {
					return err
				}
				var views []planView
				for _, n := range names {
					v := planView{Name: n}
					if err := getJSON(ctx, kv, upgrade.SpecKey(n), &v.Spec); err != nil {
						return err
					}
					if err := getJSON(ctx, kv, upgrade.ControlKey(n), &v.Control); err != nil {
						return err
					}
					if err := getJSON(ctx, kv, upgrade.ProgressKey(n), &v.Progress); err != nil {
						return err
					}
					views = append(views, v)
				}
				if output == "json" {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(views)
				}
				printUpgrade(cmd.OutOrStdout(), views)
				return nil
			})
		},
	}
	status.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	pause := &cobra.Command{Use: "pause PLAN", Short: "Start no new node (nodes past their cordon finish)", Args: cobra.ExactArgs(1),
		RunE: control("pause", func(c *plan.Control) { c.Pause, c.Reason = true, reason })}
	pause.Flags().StringVar(&reason, "reason", "", "why, shown in the status")
	resume := &cobra.Command{Use: "resume PLAN", Short: "Lift a pause (an operator's, the SLO gate's or a node's)", Args: cobra.ExactArgs(1),
		RunE: control("resume", func(c *plan.Control) { c.Pause, c.Reason = false, ""; c.ResumeSeq++ })}
	abort := &cobra.Command{Use: "abort PLAN", Short: "Roll back what is in flight and stop the plan for good", Args: cobra.ExactArgs(1),
		RunE: control("abort", func(c *plan.Control) { c.Abort, c.Reason = true, reason })}
	abort.Flags().StringVar(&reason, "reason", "", "why, shown in the status")
	f := cmd.PersistentFlags()
	f.StringVar(&url, "nats", envOr(EnvNATSURL, "nats://127.0.0.1:4222"), "NATS server URLs, comma-separated ($"+EnvNATSURL+")")
	f.StringVar(&creds, "creds", os.Getenv(EnvNATSCreds), "the admin user's credentials file ($"+EnvNATSCreds+")")
	f.StringVar(&ca, "nats-ca", os.Getenv(bus.EnvCAFile), "PEM CA file to verify the NATS servers with, over TLS ($"+bus.EnvCAFile+")")
	f.DurationVar(&wait, "wait", 15*time.Second, "deadline of the command")
	cmd.AddCommand(planCmd, status, pause, resume, abort)
	return cmd
}

// planView is one plan as status shows it.
type planView struct {
	Name     string        `json:"name"`
	Spec     plan.Spec     `json:"spec"`
	Control  plan.Control  `json:"control"`
	Progress plan.Progress `json:"progress"`
}

func planNames(ctx context.Context, kv jetstream.KeyValue, args []string) ([]string, error) {
	if len(args) == 1 {
		return args, nil
	}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range keys {
		if n, ok := strings.CutPrefix(k, "plan."); ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

func getJSON(ctx context.Context, kv jetstream.KeyValue, key string, v any) error {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	b, err := bus.Inflate(e.Value()) // a large plan's progress is gzipped
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	return json.Unmarshal(b, v)
}

// printUpgrade writes each plan: its phase and reason, then a line per
// cluster and pool with the nodes in each state, then the nodes in flight.
func printUpgrade(w io.Writer, views []planView) {
	for i, v := range views {
		if i > 0 {
			fmt.Fprintln(w)
		}
		p := v.Progress
		phase := string(p.Phase)
		if phase == "" {
			phase = "NotStarted"
		}
		fmt.Fprintf(w, "PLAN %s  %s=%s  %s", v.Name, v.Spec.Target.Label, v.Spec.Target.Value, phase)
		if p.Reason != "" {
			fmt.Fprintf(w, "  (%s)", p.Reason)
		}
		if v.Control.Pause && p.Phase != plan.PhasePaused {
			fmt.Fprint(w, "  pause requested")
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  CLUSTER\tPOOL\tWAVE\tNODES BY STATE")
		for ci, c := range v.Spec.Clusters {
			for pi, pool := range c.Pools {
				count := map[plan.NodeState]int{}
				for _, n := range p.Nodes {
					if n.Cluster == c.Name && n.Pool == pool.Name {
						count[n.State]++
					}
				}
				var parts []string
				for _, st := range slices.Sorted(maps.Keys(count)) {
					parts = append(parts, fmt.Sprintf("%s=%d", st, count[st]))
				}
				wave := "-"
				switch {
				case ci == p.Cluster && pi == p.Pool && p.Phase != plan.PhaseDone:
					wave = fmt.Sprintf("%d (current)", p.Wave)
				case ci < p.Cluster || ci == p.Cluster && pi < p.Pool || p.Phase == plan.PhaseDone:
					wave = "done"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Name, pool.Name, wave, strings.Join(parts, " "))
			}
		}
		_ = tw.Flush()
		for _, n := range p.InFlight() {
			fmt.Fprintf(w, "  node %s/%s: %s since %s %s\n", n.Cluster, n.Name, n.State, n.Since.Format(time.TimeOnly), n.Why)
		}
	}
}
