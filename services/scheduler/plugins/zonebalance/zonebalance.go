// Package zonebalance scores member clusters in lightly loaded zones
// higher, so single-cluster workloads even out the zones. The zones'
// totals come from framework.Region, computed once per decision, so a
// decision stays linear in the number of clusters.
package zonebalance

import (
	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "ZoneBalance"

// ZoneBalance is the scorer.
type ZoneBalance struct{}

var _ framework.Scorer = (*ZoneBalance)(nil)

// New returns the scorer.
func New() *ZoneBalance { return &ZoneBalance{} }

// Name implements framework.Scorer.
func (*ZoneBalance) Name() string { return Name }

// Score implements framework.Scorer: 100 minus the zone's share of the
// region's requested pods, scaled so an even split scores the same everywhere.
func (*ZoneBalance) Score(_ *framework.Workload, c *api.ClusterInfo, r *framework.Region) int64 {
	perZone, total := r.ZonePods, r.TotalPods
	if total == 0 || len(perZone) < 2 {
		return framework.MaxScore
	}
	share := perZone[c.Zone] * framework.MaxScore / total
	even := int64(framework.MaxScore / len(perZone))
	return max(0, min(framework.MaxScore, framework.MaxScore-(share-even)))
}
