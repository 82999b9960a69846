package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"atoll.dev/libs/computeapi"
)

// queueRows add to `describe` of a pending workload the tier queue it
// waits in and its position there, as of the scheduler's decision, and
// who preempted it.
func queueRows(row func(k, v string), st computeapi.WorkloadStatus) {
	if st.Queue != "" {
		line := fmt.Sprintf("%s position %d", st.Queue, st.Position)
		if !st.QueuedAt.IsZero() {
			line += fmt.Sprintf(" (as of %s)", st.QueuedAt.Local().Format(time.RFC3339))
		}
		row("Queue", line)
	}
	if st.PreemptedBy != "" {
		row("Preempted by", st.PreemptedBy)
	}
}

// printBorrowed writes, under the quota table, what the project's
// Preemptible work borrows of the capacity the other tiers leave idle,
// and that it is reclaimable.
func printBorrowed(out io.Writer, q computeapi.Quota) {
	for _, t := range q.Tiers {
		b := t.Borrowed
		if b == (computeapi.Resources{}) {
			continue
		}
		parts := []string{"cpu " + cpu(b.MilliCPU), "memory " + mem(b.MemoryBytes)}
		if b.Gpus > 0 {
			parts = append(parts, fmt.Sprintf("gpus %d", b.Gpus))
		}
		parts = append(parts, fmt.Sprintf("pods %d", b.Pods))
		fmt.Fprintf(out, "\n%s borrows %s of the capacity the other tiers leave idle.\n", t.Tier, strings.Join(parts, ", "))
		if t.Reclaimable {
			fmt.Fprintf(out, "It is reclaimable: its workloads are preempted when Reserved or OnDemand work needs the room,\nand run again when capacity returns.\n")
		}
	}
}
