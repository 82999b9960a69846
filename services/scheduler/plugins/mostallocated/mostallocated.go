// Package mostallocated scores member clusters by used capacity: it packs
// work (the Preemptible tier), leaving whole clusters free for the others.
package mostallocated

import (
	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	"atoll.dev/services/scheduler/plugins/leastallocated"
)

// Name is the plugin's name.
const Name = "MostAllocated"

// MostAllocated is the scorer.
type MostAllocated struct{}

var _ framework.Scorer = (*MostAllocated)(nil)

// New returns the scorer.
func New() *MostAllocated { return &MostAllocated{} }

// Name implements framework.Scorer.
func (*MostAllocated) Name() string { return Name }

// Score implements framework.Scorer.
func (*MostAllocated) Score(w *framework.Workload, c *api.ClusterInfo, _ *framework.Region) int64 {
	return leastallocated.Utilization(framework.CapacityFor(w, c))
}
