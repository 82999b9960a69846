package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"atoll.dev/libs/computeapi"
)

// readyColumn is get's READY: ready/desired pods, but for a CronJob its
// runs in progress and when it last fired.
func readyColumn(w computeapi.Workload, now time.Time) string {
	st := w.Status
	if w.Kind == kindCronJob {
		last := "never"
		if t := st.CronJob.LastScheduleTime; !t.IsZero() {
			last = age(t, now) + " ago"
		}
		return fmt.Sprintf("%d active, last %s", st.CronJob.Active, last)
	}
	return fmt.Sprintf("%d/%d", st.Ready, st.Desired)
}

// printByKind writes every kind's workloads as `atoll get` with no kind
// does: a table per kind, in the order of the kinds table (kinds this CLI
// does not know last, by name), each with the columns that apply to it.
func printByKind(out io.Writer, ws []computeapi.Workload, now time.Time) {
	groups := map[string][]computeapi.Workload{}
	var unknown []string
	for _, w := range ws {
		if _, ok := groups[w.Kind]; !ok && !slices.Contains(kindNames(), w.Kind) {
			unknown = append(unknown, w.Kind)
		}
		groups[w.Kind] = append(groups[w.Kind], w)
	}
	slices.Sort(unknown)
	first := true
	for _, kind := range append(kindNames(), unknown...) {
		g := groups[kind]
		if len(g) == 0 {
			continue
		}
		if !first {
			fmt.Fprintln(out)
		}
		first = false
		if infoOf(kind).Pods {
			printWorkloads(out, g, now)
			continue
		}
		tw := newTable(out)
		fmt.Fprintln(tw, "KIND\tNAME\tPHASE\tGEN\tAGE")
		for _, w := range g {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", w.Kind, w.Metadata.Name, phase(w), w.Metadata.Generation, age(w.Metadata.Created, now))
		}
		tw.Flush()
	}
}

// describeKind writes what a CronJob's and a Daemon's statuses carry
// beyond the counts of every kind.
func describeKind(out io.Writer, w computeapi.Workload, now time.Time) {
	st := w.Status
	switch w.Kind {
	case kindCronJob:
		c := st.CronJob
		fmt.Fprintf(out, "\nSchedule:\n")
		tw := newTable(out)
		when := func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}
			return fmt.Sprintf("%s (%s ago)", t.Local().Format(time.RFC3339), age(t, now))
		}
		fmt.Fprintf(tw, "  Cluster:\t%s\n", orDash(c.Cluster))
		cronSpecRows(tw, w.Spec) // kinds_describe.go
		fmt.Fprintf(tw, "  Suspended:\t%v\n", c.Suspended)
		fmt.Fprintf(tw, "  Last schedule:\t%s\n", when(c.LastScheduleTime))
		fmt.Fprintf(tw, "  Last success:\t%s\n", when(c.LastSuccessfulTime))
		fmt.Fprintf(tw, "  Active runs:\t%d\n", c.Active)
		tw.Flush()
		if len(c.Runs) > 0 {
			fmt.Fprintf(out, "\nRuns:\n")
			tw := newTable(out)
			fmt.Fprintf(tw, "  JOB\tCLUSTER\tSCHEDULED\tOUTCOME\tSUCCEEDED\tFAILED\n")
			for _, r := range c.Runs {
				at := "-"
				if !r.ScheduledTime.IsZero() {
					at = r.ScheduledTime.Local().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%d\n", r.Name, r.Cluster, at, r.Outcome, r.Succeeded, r.Failed)
			}
			tw.Flush()
		}
	case kindDaemon:
		d := st.Daemon
		fmt.Fprintf(out, "\nDaemonSets:\n")
		tw := newTable(out)
		fmt.Fprintf(tw, "  CLUSTER\tDESIRED\tCURRENT\tREADY\tUPDATED\tSTATE\n")
		for _, k := range daemonClusters(d) { // kinds_describe.go
			c := d.Clusters[k]
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%s\n", k, c.Desired, c.Current, c.Ready, c.Updated, daemonState(d, k))
		}
		fmt.Fprintf(tw, "  (total)\t%d\t%d\t%d\t%d\t\n", d.Desired, d.Current, d.Ready, d.Updated)
		tw.Flush()
		behind := "none"
		if len(d.Behind) > 0 {
			behind = strings.Join(d.Behind, ", ")
		}
		fmt.Fprintf(out, "Behind: %s\n", behind)
	case kindTrainingJob:
		describeTraining(out, w, now) // training_view.go
	case kindConfig, kindSecret:
		describeConfig(out, w, now) // config_view.go
	}
}
