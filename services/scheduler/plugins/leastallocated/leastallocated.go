// Package leastallocated scores member clusters by free capacity: it
// spreads work (the Reserved and OnDemand tiers).
package leastallocated

import (
	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "LeastAllocated"

// LeastAllocated is the scorer.
type LeastAllocated struct{}

var _ framework.Scorer = (*LeastAllocated)(nil)

// New returns the scorer.
func New() *LeastAllocated { return &LeastAllocated{} }

// Name implements framework.Scorer.
func (*LeastAllocated) Name() string { return Name }

// Score implements framework.Scorer: the mean free share of cpu and memory.
func (*LeastAllocated) Score(w *framework.Workload, c *api.ClusterInfo, _ *framework.Region) int64 {
	return framework.MaxScore - Utilization(framework.CapacityFor(w, c))
}

// Utilization is the mean requested share of cpu and memory of the pools
// a tier may use, 0..100.
func Utilization(t framework.Capacity) int64 {
	alloc, req := t.Alloc, t.Req
	if alloc.MilliCPU == 0 || alloc.MemoryBytes == 0 {
		return framework.MaxScore
	}
	cpu := req.MilliCPU * framework.MaxScore / alloc.MilliCPU
	mem := req.MemoryBytes / 1024 * framework.MaxScore / max(alloc.MemoryBytes/1024, 1)
	return max(0, min((cpu+mem)/2, framework.MaxScore))
}
