package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// adminCmd is `atoll admin`: platform configuration through the Compute
// API (platform admins).
func adminCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Platform configuration: the managed sidecars (platform admins)",
		Example: `  atoll admin sidecars set -f sidecars.yaml
  atoll admin sidecars status`,
	}
	cmd.AddCommand(sidecarsCmd(g))
	return cmd
}

// sidecarsCmd is `atoll admin sidecars get|set|history|status`.
func sidecarsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sidecars",
		Short: "The platform's managed sidecars: get, set (a new version), history, status",
		Long: `The managed sidecars are platform configuration with versions: set gives the
whole list (name, image, resources, the kinds and projects each applies to;
they start in list order, before the user's containers, as native sidecars)
and stores it as the next version. Admission injects the current version
into every workload it writes and records it in the workload; status shows
how many workloads run each version and which are behind.`,
		Example: `  atoll admin sidecars set -f sidecars.yaml
  atoll admin sidecars get -o yaml
  atoll admin sidecars history
  atoll admin sidecars status
  atoll admin sidecars pause --reason "checking the log shipper"
  atoll admin sidecars resume`,
	}
	var files []string
	set := &cobra.Command{
		Use:   "set -f FILE|-",
		Short: "Store a new version of the managed sidecars",
		Args:  cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, _ target) error {
			docs, err := readDocuments(cmd.InOrStdin(), files)
			if err != nil {
				return err
			}
			if len(docs) != 1 {
				return errors.New("-f: want one document, the whole list of sidecars")
			}
			doc, err := yaml.YAMLToJSON(docs[0])
			if err != nil {
				return fmt.Errorf("-f: %w", err)
			}
			v, err := c.SetSidecars(ctx, doc)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "managed sidecars: version %d set\n", v.Version)
			return nil
		}),
	}
	set.Flags().StringSliceVarP(&files, "filename", "f", nil, "YAML or JSON file of the sidecars (- for standard input)")
	get := &cobra.Command{
		Use:   "get",
		Short: "Show the current version",
		Args:  cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, _ target) error {
			v, err := c.Sidecars(ctx)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, v)
			}
			printSidecarVersions(cmd.OutOrStdout(), []computeapi.SidecarVersion{*v})
			return nil
		}),
	}
	history := &cobra.Command{
		Use:   "history",
		Short: "List every version, newest first",
		Args:  cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, _ target) error {
			vs, err := c.SidecarHistory(ctx)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, vs)
			}
			printSidecarVersions(cmd.OutOrStdout(), vs)
			return nil
		}),
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Show how many workloads run each version, and those behind the current one",
		Args:  cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, _ target) error {
			st, err := c.SidecarStatus(ctx)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, st)
			}
			printSidecarStatus(cmd.OutOrStdout(), st)
			return nil
		}),
	}
	cmd.AddCommand(get, set, history, status)
	for _, op := range []struct{ name, short string }{
		{"pause", "Pause the rollout: no further workload moves"},
		{"resume", "Resume the rollout, lifting any pause, the health gate's included"},
		{"abort", "Abort the rollout of the current version: no further workload moves to it"},
	} {
		var reason string
		c := &cobra.Command{
			Use:   op.name + " [--reason TEXT]",
			Short: op.short,
			Args:  cobra.NoArgs,
			RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, _ target) error {
				st, err := c.SidecarRollout(ctx, op.name, reason)
				if err != nil {
					return err
				}
				if g.output != "table" {
					return printData(cmd.OutOrStdout(), g.output, st)
				}
				printSidecarStatus(cmd.OutOrStdout(), st)
				return nil
			}),
		}
		c.Flags().StringVar(&reason, "reason", "", "why (shown in the status)")
		cmd.AddCommand(c)
	}
	return cmd
}

func printSidecarVersions(out io.Writer, vs []computeapi.SidecarVersion) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tCREATED\tBY\tSIDECARS\tROLLOUT")
	for _, v := range vs {
		var sc []string
		for _, s := range v.Sidecars {
			sc = append(sc, s.Name+"="+s.Image)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\tmaxUnavailable=%d bake=%ds onFailure=%s\n", v.Version, v.Created.Format("2006-01-02T15:04:05Z"), v.CreatedBy,
			strings.Join(sc, ","), v.Rollout.MaxUnavailable, v.Rollout.BakeSeconds, v.Rollout.OnFailure)
	}
	_ = tw.Flush()
}

// printSidecarStatus prints the rollout (its phase, then its progress per
// zone and per workload being moved), the operators' control, the
// workloads per version and those behind the current one.
func printSidecarStatus(out io.Writer, st *computeapi.SidecarStatus) {
	fmt.Fprintf(out, "current version: %d\n", st.Current)
	if ro := st.Rollout; ro.Version != 0 {
		fmt.Fprintf(out, "rollout of version %d: %s, %d done, %d moving, %d rolled back", ro.Version, ro.Phase, ro.Done, len(ro.Moving), ro.RolledBack)
		if !ro.Updated.IsZero() {
			fmt.Fprintf(out, " (as of %s)", clockOf(ro.Updated))
		}
		fmt.Fprintln(out)
		if ro.Message != "" {
			fmt.Fprintf(out, "  %s\n", ro.Message)
		}
	}
	if c := st.Control; c.Paused || c.Aborted != 0 {
		var what []string
		if c.Paused {
			what = append(what, "paused")
		}
		if c.Aborted != 0 {
			what = append(what, fmt.Sprintf("version %d aborted", c.Aborted))
		}
		if c.Reason != "" {
			what = append(what, "reason: "+c.Reason)
		}
		fmt.Fprintf(out, "control: %s\n", strings.Join(what, ", "))
	}
	if zs := st.Rollout.Zones; len(zs) > 0 {
		fmt.Fprintln(out, "\nzones, in rollout order:")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ZONE\tPHASE\tHEALTHY\tOPEN TO\tSTARTED\tREADY SINCE\tFINISHED")
		for _, z := range zs {
			healthy := "-"
			if z.Workloads > 0 {
				healthy = fmt.Sprintf("%d/%d", z.Healthy, z.Workloads)
			}
			// maxUnavailable: a moving zone opens to the moved Apps in key order.
			open := "-"
			switch z.Phase {
			case api.SidecarZoneMoving, api.SidecarZoneBaking, api.SidecarZoneDone, api.SidecarZoneFailed:
				open = "all"
				if z.Through != "" {
					open = "through " + z.Through
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", z.Name, z.Phase, healthy, open, clockOf(z.Started), clockOf(z.ReadySince), clockOf(z.Finished))
		}
		_ = tw.Flush()
	}
	if ms := st.Rollout.Moving; len(ms) > 0 {
		fmt.Fprintln(out, "\nworkloads being moved:")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKLOAD\tFROM\tGENERATION\tSTARTED\tHEALTH GATE")
		for _, m := range ms {
			gate := "not ready"
			if !m.ReadySince.IsZero() {
				gate = "ready since " + clockOf(m.ReadySince)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", m.Key, m.From, m.Generation, clockOf(m.Started), gate)
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tWORKLOADS")
	for _, v := range st.Versions {
		fmt.Fprintf(tw, "%d\t%d\n", v.Version, v.Workloads)
	}
	_ = tw.Flush()
	if len(st.Behind) == 0 {
		return
	}
	fmt.Fprintln(out, "\nbehind the current version:")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROJECT\tKIND\tNAME\tVERSION")
	for _, b := range st.Behind {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", b.Project, b.Kind, b.Name, b.Version)
	}
	_ = tw.Flush()
}

// clockOf writes t as a UTC time of day, "-" when zero.
func clockOf(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05")
}
