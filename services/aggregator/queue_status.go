package aggregator

import "atoll.dev/libs/api"

// setQueued copies the scheduler's queue facts of an unschedulable
// workload into its status, for `atoll describe` and the Compute API:
// the tier queue, the position there and who preempted it, as of the
// decision (the scheduler rewrites a placement only when something other
// than the position changes, so the position is as of QueuedAt).
func setQueued(p *api.PlacementDecision, st *api.Status) {
	if p.Queue == "" && p.PreemptedBy == "" {
		return
	}
	st.Queue, st.Position, st.PreemptedBy, st.QueuedAt = p.Queue, p.Position, p.PreemptedBy, p.Decided
}
