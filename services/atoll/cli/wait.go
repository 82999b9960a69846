package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/sdk"
)

// waitPoll is how often `atoll wait` reads the workload again.
const waitPoll = 500 * time.Millisecond

// waitCondition is what `atoll wait --for` waits for: met reports whether
// the workload got there and what it is at now (for the messages).
type waitCondition struct {
	what string
	met  func(ctx context.Context, c *sdk.Client, project, kind, name string) (ok bool, now string, err error)
}

// parseWaitFor reads --for: phase=P (any kind), ready=N (exactly N
// ready pods), rollout=P (an App's rollout phase), runs=N (a CronJob's
// runs, any outcome) or delete (the workload is gone).
func parseWaitFor(kind, s string) (waitCondition, error) {
	if s == "delete" {
		return waitCondition{what: "deleted", met: func(ctx context.Context, c *sdk.Client, project, kind, name string) (bool, string, error) {
			w, err := c.Get(ctx, project, kind, name)
			if sdk.IsNotFound(err) {
				return true, "deleted", nil
			}
			if err != nil {
				return false, "", err
			}
			return false, "phase=" + w.Status.Phase, nil
		}}, nil
	}
	key, val, ok := strings.Cut(s, "=")
	if !ok || val == "" {
		return waitCondition{}, fmt.Errorf("--for %q: want phase=PHASE, ready=N, rollout=PHASE, runs=N or delete", s)
	}
	switch key {
	case "phase":
		return waitCondition{what: s, met: func(ctx context.Context, c *sdk.Client, project, kind, name string) (bool, string, error) {
			w, err := c.Get(ctx, project, kind, name)
			if err != nil {
				return false, "", err
			}
			return strings.EqualFold(w.Status.Phase, val), "phase=" + w.Status.Phase, nil
		}}, nil
	case "rollout":
		if kind != kindApp {
			return waitCondition{}, fmt.Errorf("--for %s: only an App has a rollout", s)
		}
		return waitCondition{what: s, met: func(ctx context.Context, c *sdk.Client, project, _, name string) (bool, string, error) {
			ro, err := c.Rollout(ctx, project, name)
			if err != nil {
				return false, "", err
			}
			return strings.EqualFold(string(ro.Phase), val), "rollout=" + string(ro.Phase), nil
		}}, nil
	case "ready":
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			return waitCondition{}, fmt.Errorf("--for %s: want ready=N, N at least 0", s)
		}
		return waitCondition{what: s, met: func(ctx context.Context, c *sdk.Client, project, kind, name string) (bool, string, error) {
			w, err := c.Get(ctx, project, kind, name)
			if err != nil {
				return false, "", err
			}
			return int(w.Status.Ready) == n, "ready=" + strconv.Itoa(int(w.Status.Ready)), nil
		}}, nil
	case "runs":
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 {
			return waitCondition{}, fmt.Errorf("--for %s: want runs=N, N at least 1", s)
		}
		if kind != kindCronJob {
			return waitCondition{}, fmt.Errorf("--for %s: only a CronJob has runs", s)
		}
		return waitCondition{what: s, met: func(ctx context.Context, c *sdk.Client, project, kind, name string) (bool, string, error) {
			w, err := c.Get(ctx, project, kind, name)
			if err != nil {
				return false, "", err
			}
			got := len(w.Status.CronJob.Runs)
			return got >= n, "runs=" + strconv.Itoa(got), nil
		}}, nil
	}
	return waitCondition{}, fmt.Errorf("--for %q: unknown condition %q (want phase, ready, rollout, runs or delete)", s, key)
}

func waitCmd(g *globals) *cobra.Command {
	var cond string
	cmd := &cobra.Command{
		Use:   "wait KIND NAME --for phase=PHASE|ready=N|rollout=PHASE|runs=N|delete",
		Short: "Wait until a workload reaches a phase or a number of ready pods, an App's rollout a phase, or a CronJob a number of runs",
		Long: `wait reads the workload every half second until the condition holds, then
prints it and exits 0; it fails when --timeout passes first (default 30s),
saying where the workload is. Conditions (case-insensitive values):
  phase=PHASE     the workload's phase (Running, Succeeded, Stopped, ...)
  ready=N         exactly N of its pods are ready (after a scale)
  rollout=PHASE   an App's zone-by-zone rollout (Complete, Paused, RolledBack)
  runs=N          a CronJob has made at least N runs (any outcome)
  delete          the workload is gone (after 'atoll delete')`,
		Example: `  atoll wait app web --for phase=Running --timeout 2m
  atoll wait app web --for ready=6
  atoll wait app web --for rollout=Complete --timeout 3m
  atoll wait cronjob tick --for runs=1 --timeout 2m
  atoll wait app web --for delete`,
		Args: cobra.ExactArgs(2),
		RunE: g.onWorkload(false, nil, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, kind, name string) error {
			wc, err := parseWaitFor(kind, cond)
			if err != nil {
				return err
			}
			start := time.Now()
			now := ""
			for {
				ok, at, err := wc.met(ctx, c, project, kind, name)
				switch {
				case ok:
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s after %v\n", ref(kind, name), wc.what, time.Since(start).Round(100*time.Millisecond))
					return nil
				case err != nil && ctx.Err() == nil && !sdk.IsNotFound(err):
					return err
				case err == nil:
					now = at
				}
				select {
				case <-ctx.Done():
					if now == "" {
						now = "not found"
					}
					return fmt.Errorf("%s: not %s within %v (now %s)", ref(kind, name), wc.what, g.timeout, now)
				case <-time.After(waitPoll):
				}
			}
		}),
	}
	cmd.Flags().StringVar(&cond, "for", "", "the condition: phase=PHASE, ready=N, rollout=PHASE, runs=N or delete")
	_ = cmd.MarkFlagRequired("for")
	return cmd
}
