package cli

import (
	"fmt"
	"io"
	"time"

	"atoll.dev/libs/computeapi"
)

// describeTraining writes a TrainingJob's gang: where it runs, its
// requeues and restarts, and each rank's pod, phase, node and restarts.
func describeTraining(out io.Writer, w computeapi.Workload, now time.Time) {
	tr := w.Status.Training
	fmt.Fprintf(out, "\nGang:\n")
	tw := newTable(out)
	fmt.Fprintf(tw, "  Cluster:\t%s\n", orDash(tr.Cluster))
	fmt.Fprintf(tw, "  Workers:\t%d\n", tr.Workers)
	fmt.Fprintf(tw, "  Attempt:\t%d\n", tr.Attempt)
	fmt.Fprintf(tw, "  Requeues:\t%d\n", tr.Requeues)
	fmt.Fprintf(tw, "  Restarts:\t%d\n", tr.Restarts)
	if !tr.NextAttempt.IsZero() && tr.Cluster == "" {
		fmt.Fprintf(tw, "  Next attempt:\t%s (in %s)\n", tr.NextAttempt.Local().Format(time.RFC3339), tr.NextAttempt.Sub(now).Round(time.Second))
	}
	if tr.LastRequeue != "" {
		fmt.Fprintf(tw, "  Last requeue:\t%s\n", tr.LastRequeue)
	}
	tw.Flush()
	if len(tr.Ranks) == 0 {
		return
	}
	fmt.Fprintf(out, "\nRanks:\n")
	tw = newTable(out)
	fmt.Fprintf(tw, "  RANK\tPOD\tPHASE\tNODE\tRESTARTS\n")
	for _, r := range tr.Ranks {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\n", r.Rank, orDash(r.Pod), r.Phase, orDash(r.Node), r.Restarts)
	}
	tw.Flush()
}
