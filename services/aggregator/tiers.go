package aggregator

import (
	"fmt"

	"atoll.dev/libs/api"
)

// queuedConditions say, for an unschedulable workload, which tier queue
// of the scheduler it waits in and where (as of the scheduler's last
// decision), and who preempted it, if it was.
func queuedConditions(p *api.PlacementDecision) []api.Condition {
	var out []api.Condition
	if p.Queue != "" {
		out = append(out, api.Condition{Type: "Queued", Status: true, Reason: p.Queue + "Queue",
			Message: fmt.Sprintf("waiting in the %s queue at position %d", p.Queue, p.Position)})
	}
	if p.PreemptedBy != "" {
		out = append(out, api.Condition{Type: "Preempted", Status: true, Reason: "Preempted",
			Message: fmt.Sprintf("preempted by %s; runs again when capacity returns", p.PreemptedBy)})
	}
	return out
}
