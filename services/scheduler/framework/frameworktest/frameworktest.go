// Package frameworktest builds cluster inventories and workloads for the
// scheduler's tests.
package frameworktest

import (
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// Cluster returns a healthy cluster with one pool of nodes of 32 CPU,
// 128 GiB and 110 pods each, with usedPods pods of 1 CPU and 1 GiB requested.
func Cluster(name, zone string, nodes int, usedPods int64) *api.ClusterInfo {
	n := int64(nodes)
	return &api.ClusterInfo{
		Name: name, Zone: zone, Healthy: true,
		Pools: map[string]api.PoolInfo{"general": {
			Nodes: nodes, ReadyNodes: nodes,
			Allocatable:     api.Quantities{MilliCPU: 32000 * n, MemoryBytes: 128 << 30 * n},
			Requested:       api.Quantities{MilliCPU: 1000 * usedPods, MemoryBytes: 1 << 30 * usedPods},
			AllocatablePods: 110 * n, RequestedPods: usedPods,
			MaxNodeFree: api.Quantities{MilliCPU: 32000, MemoryBytes: 128 << 30},
		}},
	}
}

// WithGPUs adds a pool of GPU nodes of the given type.
func WithGPUs(c *api.ClusterInfo, nodes int, perNode int64, gpuType string) *api.ClusterInfo {
	n := int64(nodes)
	c.Pools["gpu"] = api.PoolInfo{
		Nodes: nodes, ReadyNodes: nodes, GPUType: gpuType,
		Allocatable:     api.Quantities{MilliCPU: 64000 * n, MemoryBytes: 512 << 30 * n, GPUs: perNode * n},
		AllocatablePods: 110 * n,
		MaxNodeFree:     api.Quantities{MilliCPU: 64000, MemoryBytes: 512 << 30, GPUs: perNode},
	}
	return c
}

// Workload returns a plugin view of a workload of pods pods, each asking
// 1 CPU and 1 GiB.
func Workload(pods int32, pl *api.Placement) *framework.Workload {
	if pl == nil {
		pl = &api.Placement{}
	}
	return &framework.Workload{Key: "p.app.w", Kind: api.KindApp, Tier: api.TierOnDemand, Placement: pl,
		PerPod: api.Quantities{MilliCPU: 1000, MemoryBytes: 1 << 30}, Pods: pods}
}

// Prefers fails t unless s scores better above worse, both within
// [0, framework.MaxScore].
func Prefers(t testing.TB, s framework.Scorer, w *framework.Workload, better, worse *api.ClusterInfo, all []*api.ClusterInfo) {
	t.Helper()
	r := framework.NewRegion(all)
	b, wo := s.Score(w, better, r), s.Score(w, worse, r)
	if b <= wo || b > framework.MaxScore || wo < 0 {
		t.Errorf("%s: better %s scored %d, worse %s scored %d", s.Name(), better.Name, b, worse.Name, wo)
	}
}
