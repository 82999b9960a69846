package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// rolloutCmd is `atoll rollout status|pause|resume|undo NAME`: an App's
// zone-by-zone rollout.
func rolloutCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "An App's zone-by-zone rollout: status, pause, resume, undo",
		Long: `A template change of an App rolls out one zone at a time (spec.rollout.order,
else the zones sorted): each zone must become fully available on the new
template and stay so for the bake time (spec.rollout.bakeSeconds) before the
next starts. A zone that misses its deadline (spec.rollout.deadlineSeconds)
or crash-loops pauses the rollout and, per spec.rollout.onFailure (Pause,
RollbackZone, RollbackAll), rolls that zone or every zone back.
pause holds the rollout, resume continues it (retrying a failed zone), undo
returns every zone to the stable template.`,
		Example: `  atoll rollout status web
  atoll rollout pause web
  atoll rollout undo web`,
	}
	cmd.AddCommand(&cobra.Command{
		Use: "status NAME", Short: "The rollout's phase and each zone's state", Args: cobra.ExactArgs(1),
		RunE: g.onApp(func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, name string) error {
			ro, err := c.Rollout(ctx, project, name)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, ro)
			}
			printRollout(cmd.OutOrStdout(), ro, time.Now())
			return nil
		}),
	})
	for _, action := range []string{"pause", "resume", "undo"} {
		cmd.AddCommand(&cobra.Command{
			Use: action + " NAME", Short: rolloutShort[action], Args: cobra.ExactArgs(1),
			RunE: g.onApp(func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, name string) error {
				w, err := c.OperateRollout(ctx, project, name, action)
				if err != nil {
					return err
				}
				return g.printWorkload(cmd.OutOrStdout(), w, "rollout "+action+" requested")
			}),
		})
	}
	return cmd
}

var rolloutShort = map[string]string{
	"pause":  "Hold the rollout where it is",
	"resume": "Continue the rollout (a failed zone is tried again)",
	"undo":   "Return every zone to the stable template",
}

// onApp runs fn for the App named by the only argument.
func (g *globals) onApp(fn func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, name string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			project, err := t.needProject()
			if err != nil {
				return err
			}
			if err := fn(ctx, cmd, c, project, args[0]); err != nil {
				return fmt.Errorf("rollout %s of app/%s in project %s: %w", cmd.Name(), args[0], project, err)
			}
			return nil
		})(cmd, args)
	}
}

func printRollout(out io.Writer, ro *computeapi.Rollout, now time.Time) {
	fmt.Fprintf(out, "Phase:   %s\n", ro.Phase)
	fmt.Fprintf(out, "Stable:  %s\n", ro.Stable)
	if ro.Target != "" {
		fmt.Fprintf(out, "Target:  %s\n", ro.Target)
	}
	if ro.Abandoned != "" {
		fmt.Fprintf(out, "Abandoned: %s\n", ro.Abandoned)
	}
	if ro.Message != "" {
		fmt.Fprintf(out, "Message: %s\n", ro.Message)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ZONE\tSTATE\tREVISION\tSTARTED\tAVAILABLE FOR\tMESSAGE")
	for _, z := range ro.Zones {
		started, avail := "-", "-"
		if !z.Started.IsZero() {
			started = now.Sub(z.Started).Round(time.Second).String() + " ago"
		}
		if !z.AvailableSince.IsZero() && z.State == computeapi.ZoneRolloutStateBaking {
			avail = now.Sub(z.AvailableSince).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", z.Zone, z.State, z.Revision, started, avail, z.Message)
	}
	_ = tw.Flush()
}
