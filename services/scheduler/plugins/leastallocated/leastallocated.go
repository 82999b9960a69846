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
func (*LeastAllocated) Score(_ *framework.Workload, c *api.ClusterInfo, _ []*api.ClusterInfo) int64 {
	return framework.MaxScore - Utilization(c)
}

// Utilization is the mean requested share of cpu and memory, 0..100.
func Utilization(c *api.ClusterInfo) int64 {
	alloc, req, _, _, _ := framework.Totals(c)
	if alloc.MilliCPU == 0 || alloc.MemoryBytes == 0 {
		return framework.MaxScore
	}
	cpu := req.MilliCPU * framework.MaxScore / alloc.MilliCPU
	mem := req.MemoryBytes / 1024 * framework.MaxScore / max(alloc.MemoryBytes/1024, 1)
	return min((cpu+mem)/2, framework.MaxScore)
}
