// Package framework is the scheduler's plugin framework, in karmada's
// shape: filters drop member clusters that cannot take a workload and say
// why; scorers rank the rest from 0 to 100.
package framework

import "atoll.dev/libs/api"

// MaxScore is the highest score a scorer gives.
const MaxScore = 100

// Workload is what plugins see of a workload.
type Workload struct {
	// Key is the workload's key.
	Key string
	// Kind is the workload's kind.
	Kind string
	// Tier is how its resources are guaranteed.
	Tier api.Tier
	// Placement holds its constraints (never nil).
	Placement *api.Placement
	// PerPod is one pod's requests.
	PerPod api.Quantities
	// Pods is how many pods run at once.
	Pods int32
}

// NewWorkload extracts what plugins need from a workload.
func NewWorkload(w *api.Workload) *Workload {
	tier, pl := w.Spec.Scheduling()
	return &Workload{Key: w.Key(), Kind: w.Kind, Tier: tier, Placement: pl, PerPod: w.Spec.PodTemplate().PodRequests(), Pods: w.Spec.Pods()}
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
	// Score returns 0..MaxScore; higher is better.
	Score(w *Workload, c *api.ClusterInfo, all []*api.ClusterInfo) int64
}

// Totals sums a cluster's pools.
func Totals(c *api.ClusterInfo) (alloc, req api.Quantities, allocPods, reqPods int64, maxFree api.Quantities) {
	for _, p := range c.Pools {
		alloc.MilliCPU += p.Allocatable.MilliCPU
		alloc.MemoryBytes += p.Allocatable.MemoryBytes
		alloc.GPUs += p.Allocatable.GPUs
		req.MilliCPU += p.Requested.MilliCPU
		req.MemoryBytes += p.Requested.MemoryBytes
		req.GPUs += p.Requested.GPUs
		allocPods += p.AllocatablePods
		reqPods += p.RequestedPods
		maxFree.MilliCPU = max(maxFree.MilliCPU, p.MaxNodeFree.MilliCPU)
		maxFree.MemoryBytes = max(maxFree.MemoryBytes, p.MaxNodeFree.MemoryBytes)
		maxFree.GPUs = max(maxFree.GPUs, p.MaxNodeFree.GPUs)
	}
	return
}

// PodsThatFit is how many more pods of size per fit in the cluster by its
// aggregate free capacity.
func PodsThatFit(c *api.ClusterInfo, per api.Quantities) int64 {
	alloc, req, allocPods, reqPods, _ := Totals(c)
	n := allocPods - reqPods
	if per.MilliCPU > 0 {
		n = min(n, (alloc.MilliCPU-req.MilliCPU)/per.MilliCPU)
	}
	if per.MemoryBytes > 0 {
		n = min(n, (alloc.MemoryBytes-req.MemoryBytes)/per.MemoryBytes)
	}
	if per.GPUs > 0 {
		n = min(n, (alloc.GPUs-req.GPUs)/per.GPUs)
	}
	return max(n, 0)
}
