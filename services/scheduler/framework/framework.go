// Package framework is the scheduler's plugin framework, in karmada's
// shape: filters drop member clusters that cannot take a workload and say
// why; scorers rank the rest from 0 to 100.
//
// Pools per tier. What a workload may use of a cluster depends on its
// tier (Capacity): Reserved work uses the cluster's Reserved pools when it
// has any, else its shared pools, and may use the burst buffer; OnDemand
// work uses the shared pools minus the buffer; Preemptible work uses the
// shared pools minus the buffer, and the Reserved pools too when
// Options.PreemptibleOnReserved allows it.
//
// Cost. A decision is linear in the number of clusters: what a scorer
// needs of the whole region (zone totals) is computed once per decision
// (NewRegion), never per candidate.
package framework

import (
	"fmt"

	"atoll.dev/libs/api"
)

// MaxScore is the highest score a scorer gives.
const MaxScore = 100

// Options are the platform's scheduling configuration.
type Options struct {
	// PreemptibleOnReserved lets Preemptible work run on idle capacity of
	// Reserved pools (where it is the first to be preempted).
	PreemptibleOnReserved bool
	// BufferPercent is the share of each pool, in percent, kept free for
	// bursts on clusters without their own buffer label
	// (api.LabelBufferPercent).
	BufferPercent int64
}

// Workload is what plugins see of a workload.
type Workload struct {
	// Key is the workload's key.
	Key string
	// Kind is the workload's kind.
	Kind string
	// Tier is how its resources are guaranteed.
	Tier api.Tier
	// Priority orders it within its tier.
	Priority int32
	// Placement holds its constraints (never nil).
	Placement *api.Placement
	// PerPod is one pod's requests.
	PerPod api.Quantities
	// Pods is how many pods run at once.
	Pods int32
	// Options is the platform's configuration the decision runs under.
	Options Options

	// capOf and capacity cache the last CapacityFor: a decision's filters
	// and scorers ask for each cluster's in turn.
	capOf    *api.ClusterInfo
	capacity Capacity
}

// NewWorkload extracts what plugins need from a workload.
func NewWorkload(w *api.Workload, o Options) *Workload {
	tier, pl := w.Spec.Scheduling()
	return &Workload{Key: w.Key(), Kind: w.Kind, Tier: tier, Priority: api.PriorityOf(w), Placement: pl,
		PerPod: w.Spec.PodTemplate().PodRequests(), Pods: w.Spec.Pods(), Options: o}
}

// Filter decides whether a cluster can take a workload.
type Filter interface {
	// Name is the plugin's name, used in reasons.
	Name() string
	// Filter returns "" when the cluster passes, or why it does not.
	Filter(w *Workload, c *api.ClusterInfo) string
}

// Scorer ranks a cluster that passed every filter.
type Scorer interface {
	// Name is the plugin's name.
	Name() string
	// Score returns 0..MaxScore; higher is better. r holds what the
	// decision computed once about every cluster.
	Score(w *Workload, c *api.ClusterInfo, r *Region) int64
}

// Region is what a decision computes once about all clusters, for the
// scorers: requested pods per zone and in all.
type Region struct {
	// ZonePods is the number of requested pods per zone.
	ZonePods map[string]int64
	// TotalPods is the sum of ZonePods.
	TotalPods int64
}

// NewRegion sums the clusters' requested pods per zone: once per
// decision, O(clusters × pools).
func NewRegion(all []*api.ClusterInfo) *Region {
	r := &Region{ZonePods: make(map[string]int64, 8)}
	for _, c := range all {
		var pods int64
		for _, p := range c.Pools {
			pods += p.RequestedPods
		}
		r.ZonePods[c.Zone] += pods
		r.TotalPods += pods
	}
	return r
}

// Totals sums all of a cluster's pools, whatever their tier.
func Totals(c *api.ClusterInfo) (alloc, req api.Quantities, allocPods, reqPods int64, maxFree api.Quantities) {
	var t Capacity
	for _, p := range c.Pools {
		t.add(p, 0)
	}
	return t.Alloc, t.Req, t.AllocPods, t.ReqPods, t.MaxFree
}

// Capacity is the part of a cluster that a tier may use: the sums over
// the pools it may use, with the buffer it must leave subtracted from
// what is allocatable.
type Capacity struct {
	Alloc, Req         api.Quantities
	AllocPods, ReqPods int64
	// MaxFree is the largest free amount on one node of those pools.
	MaxFree api.Quantities
	// Buffer and BufferPods are what the tier must leave free (already
	// taken out of Alloc and AllocPods).
	Buffer     api.Quantities
	BufferPods int64
	// Pools is how many pools count; ReservedPools says they are the
	// cluster's Reserved pools.
	Pools         int
	ReservedPools bool
	// AllPools says Preemptible work counts the Reserved pools too.
	AllPools bool
}

func (t *Capacity) add(p api.PoolInfo, bufferPct int64) {
	buf := api.Quantities{
		MilliCPU:    p.Allocatable.MilliCPU * bufferPct / 100,
		MemoryBytes: p.Allocatable.MemoryBytes / 100 * bufferPct,
		GPUs:        p.Allocatable.GPUs * bufferPct / 100,
	}
	bufPods := p.AllocatablePods * bufferPct / 100
	t.Alloc.MilliCPU += p.Allocatable.MilliCPU - buf.MilliCPU
	t.Alloc.MemoryBytes += p.Allocatable.MemoryBytes - buf.MemoryBytes
	t.Alloc.GPUs += p.Allocatable.GPUs - buf.GPUs
	t.Req.MilliCPU += p.Requested.MilliCPU
	t.Req.MemoryBytes += p.Requested.MemoryBytes
	t.Req.GPUs += p.Requested.GPUs
	t.AllocPods += p.AllocatablePods - bufPods
	t.ReqPods += p.RequestedPods
	t.Buffer.MilliCPU += buf.MilliCPU
	t.Buffer.MemoryBytes += buf.MemoryBytes
	t.Buffer.GPUs += buf.GPUs
	t.BufferPods += bufPods
	t.MaxFree.MilliCPU = max(t.MaxFree.MilliCPU, p.MaxNodeFree.MilliCPU)
	t.MaxFree.MemoryBytes = max(t.MaxFree.MemoryBytes, p.MaxNodeFree.MemoryBytes)
	t.MaxFree.GPUs = max(t.MaxFree.GPUs, p.MaxNodeFree.GPUs)
	t.Pools++
}

// Free is what is left of the capacity (negative: over-committed).
func (t Capacity) Free() (q api.Quantities, pods int64) {
	return api.Quantities{
		MilliCPU:    t.Alloc.MilliCPU - t.Req.MilliCPU,
		MemoryBytes: t.Alloc.MemoryBytes - t.Req.MemoryBytes,
		GPUs:        t.Alloc.GPUs - t.Req.GPUs,
	}, t.AllocPods - t.ReqPods
}

// PodsThatFit is how many more pods of size per fit by the aggregate
// free capacity.
func (t Capacity) PodsThatFit(per api.Quantities) int64 {
	free, n := t.Free()
	return PodsIn(free, n, per)
}

// PodsIn is how many pods of size per fit in free (and in pods slots).
func PodsIn(free api.Quantities, pods int64, per api.Quantities) int64 {
	n := pods
	if per.MilliCPU > 0 {
		n = min(n, free.MilliCPU/per.MilliCPU)
	}
	if per.MemoryBytes > 0 {
		n = min(n, free.MemoryBytes/per.MemoryBytes)
	}
	if per.GPUs > 0 {
		n = min(n, free.GPUs/per.GPUs)
	}
	return max(n, 0)
}

// PoolClass says which of a cluster's pools a tier places on: the
// Reserved pools (true) or the shared ones. Preemptible work allowed on
// Reserved pools uses both; it reports the shared class.
func PoolClass(tier api.Tier, c *api.ClusterInfo) (reserved bool) {
	return tier == api.TierReserved && c.HasReservedPools()
}

// CapacityFor is the part of cluster c that workload w's tier may use.
func CapacityFor(w *Workload, c *api.ClusterInfo) Capacity {
	if w.capOf != c {
		w.capOf, w.capacity = c, CapacityOf(w.Tier, c, w.Options)
	}
	return w.capacity
}

// CapacityOf is the part of cluster c that tier may use, under o.
func CapacityOf(tier api.Tier, c *api.ClusterInfo, o Options) Capacity {
	var t Capacity
	buffer := c.BufferPercent(o.BufferPercent)
	switch {
	case tier == api.TierReserved:
		reserved := c.HasReservedPools()
		t.ReservedPools = reserved
		for _, p := range c.Pools {
			if p.IsReserved() == reserved {
				t.add(p, 0) // Reserved work may use the buffer
			}
		}
	case tier == api.TierPreemptible && o.PreemptibleOnReserved:
		t.AllPools = true
		for _, p := range c.Pools {
			t.add(p, buffer)
		}
	default:
		for _, p := range c.Pools {
			if !p.IsReserved() {
				t.add(p, buffer)
			}
		}
	}
	return t
}

// PodsThatFit is how many more pods of w fit in the part of c its tier
// may use.
func PodsThatFit(w *Workload, c *api.ClusterInfo) int64 {
	return CapacityFor(w, c).PodsThatFit(w.PerPod)
}

// Describe says which pools a capacity counts, for reasons.
func (t Capacity) Describe(tier api.Tier) string {
	what := "shared pools"
	switch {
	case t.ReservedPools:
		what = "Reserved pools"
	case t.AllPools:
		what = "shared and idle Reserved pools"
	}
	if t.BufferPods > 0 || t.Buffer.MilliCPU > 0 || t.Buffer.MemoryBytes > 0 {
		return fmt.Sprintf("%s work on %s, burst buffer of %dm cpu and %d pods kept free", tier, what, t.Buffer.MilliCPU, t.BufferPods)
	}
	return fmt.Sprintf("%s work on %s", tier, what)
}
