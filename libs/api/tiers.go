package api

import (
	"strconv"
	"strings"
)

// Pools per tier. A node pool whose nodes carry the label atoll.dev/tier
// (NodeLabelTier) with the value PoolTierReserved is a Reserved pool: it
// backs Reserved quota. Every other pool (no label, or any other value) is
// shared: OnDemand work runs there, Preemptible work runs on whatever is
// idle. The aggregator copies the label into PoolInfo.Tier. Reserved
// pools' nodes should also carry the taint atoll.dev/tier=Reserved:NoSchedule
// so that pods of shared pools stay off them; the propagator pins the pods
// of a shard on Reserved pools (Shard.PoolTier) to those nodes and lets
// them tolerate the taint.
const (
	PoolTierReserved = "Reserved"
	PoolTierShared   = ""
)

// IsReserved reports whether the pool is a Reserved pool.
func (p PoolInfo) IsReserved() bool { return strings.EqualFold(p.Tier, PoolTierReserved) }

// HasReservedPools reports whether any of the cluster's pools is Reserved.
func (c *ClusterInfo) HasReservedPools() bool {
	for _, p := range c.Pools {
		if p.IsReserved() {
			return true
		}
	}
	return false
}

// LabelBufferPercent is the cluster label (set by platform admins with
// `atoll clusters --label`) giving the share of each of the cluster's
// pools, in percent of its allocatable cpu, memory and pod slots, that
// OnDemand and Preemptible placements leave free for bursts; Reserved
// placements may use it. Without the label the scheduler's default holds.
const LabelBufferPercent = "scheduling.atoll.dev/buffer-percent"

// BufferPercent returns the cluster's buffer share from its label, or def
// when the label is absent or not a whole number between 0 and 100.
func (c *ClusterInfo) BufferPercent(def int64) int64 {
	v, ok := c.Labels[LabelBufferPercent]
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(v, "%"), 10, 64)
	if err != nil || n < 0 || n > 100 {
		return def
	}
	return n
}

// TierRank orders tiers for scheduling: Reserved (0) before OnDemand (1)
// before Preemptible (2); an unknown tier ranks as OnDemand.
func TierRank(t Tier) int {
	switch t {
	case TierReserved:
		return 0
	case TierPreemptible:
		return 2
	default:
		return 1
	}
}

// Priority bounds of a workload's spec.priority: higher is scheduled
// earlier within its tier and, among Preemptible work, preempted later.
const (
	MinPriority = 0
	MaxPriority = 1000
)

// EventPreempted is published for a Preemptible workload whose placement
// was taken back to make room for a Reserved or OnDemand one.
const EventPreempted = "preempted"

// SchedulingPriority returns spec.priority.
func (c *Common) SchedulingPriority() int32 { return c.Priority }

// PriorityOf returns a workload's spec.priority (0 for a kind without one).
func PriorityOf(w *Workload) int32 {
	if p, ok := w.Spec.(interface{ SchedulingPriority() int32 }); ok {
		return p.SchedulingPriority()
	}
	return 0
}
