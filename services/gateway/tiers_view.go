package gateway

import (
	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

// What Preemptible borrows. Preemptible quota buys no capacity of its
// own: every Preemptible pod runs on capacity the Reserved and OnDemand
// tiers leave idle when it is placed (the shared pools' free room, and
// the Reserved pools' when the platform lets Preemptible work on them;
// never a cluster's burst buffer, which only Reserved placements may
// use). So a project's borrowed figure is exactly its Preemptible usage
// in the quota ledger: what its admitted Preemptible workloads hold
// (cpu, memory, GPUs, pods), placed or waiting to run again after a
// preemption (a preempted workload keeps its reservation: it is never
// lost). All of it is reclaimable: when a Reserved or OnDemand workload
// does not fit, the scheduler preempts Preemptible work, and only it.
// The figure comes from the ledger alone (the gateway's mirror of the
// quota bucket), so it costs nothing per request.

// borrowedView fills the borrowed figure of the Preemptible tier's row,
// reclaimable when anything is borrowed.
func borrowedView(l *api.Ledger, tq *computeapi.TierQuota) {
	if l == nil || api.Tier(tq.Tier) != api.TierPreemptible {
		return
	}
	u := l.Used(api.TierPreemptible)
	tq.Borrowed = computeapi.Resources{MilliCPU: u.MilliCPU, MemoryBytes: u.MemoryBytes, Gpus: u.GPUs, Pods: u.Pods, StorageBytes: u.StorageBytes}
	tq.Reclaimable = tq.Borrowed != (computeapi.Resources{})
}

// queueStatusView copies the queue facts of an unschedulable workload:
// its tier queue and position there, as of the scheduler's decision, and
// who preempted it.
func queueStatusView(st *api.Status, v *computeapi.WorkloadStatus) {
	v.Queue, v.Position, v.PreemptedBy, v.QueuedAt = st.Queue, st.Position, st.PreemptedBy, st.QueuedAt
}
