package scheduler

import (
	"fmt"
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// benchRegion returns n clusters of 500 nodes over zones a, b and c, each
// with a shared pool a third used and a Reserved pool of 50 nodes.
func benchRegion(n int) []*api.ClusterInfo {
	out := make([]*api.ClusterInfo, n)
	for i := range out {
		zone := string(rune('a' + i%3))
		out[i] = &api.ClusterInfo{
			Name: fmt.Sprintf("c%04d", i), Zone: zone, Healthy: true,
			Pools: map[string]api.PoolInfo{
				"general": {
					Nodes: 450, ReadyNodes: 450,
					Allocatable:     api.Quantities{MilliCPU: 450 * 32000, MemoryBytes: 450 * (128 << 30)},
					Requested:       api.Quantities{MilliCPU: 150 * 32000, MemoryBytes: 150 * (128 << 30)},
					AllocatablePods: 450 * 110, RequestedPods: 150 * 110,
					MaxNodeFree: api.Quantities{MilliCPU: 32000, MemoryBytes: 128 << 30},
				},
				"reserved": {
					Nodes: 50, ReadyNodes: 50, Tier: api.PoolTierReserved,
					Allocatable:     api.Quantities{MilliCPU: 50 * 32000, MemoryBytes: 50 * (128 << 30)},
					AllocatablePods: 50 * 110,
					MaxNodeFree:     api.Quantities{MilliCPU: 32000, MemoryBytes: 128 << 30},
				},
			},
		}
	}
	return out
}

// benchWorkloads returns n Apps of 1 to 30 replicas, the tiers mixed.
func benchWorkloads(n int) []*api.Workload {
	tiers := []api.Tier{api.TierPreemptible, api.TierOnDemand, api.TierPreemptible, api.TierReserved}
	out := make([]*api.Workload, n)
	for i := range out {
		w := app(int32(1+i%30), nil)
		w.Metadata.Name = fmt.Sprintf("w%05d", i)
		w.Spec.(*api.AppSpec).Tier = tiers[i%len(tiers)]
		out[i] = w
	}
	return out
}

// BenchmarkDecide measures Decide alone at 10 to 1,000 clusters of 500
// nodes, for mixed-tier Apps of 1 to 30 replicas, and prints the cost
// per decision and per cluster against 100 clusters in the same run: a
// linear decision keeps the per-cluster ratio near 1.
//
//	go test -run '^$' -bench BenchmarkDecide -benchtime 1x .
func BenchmarkDecide(b *testing.B) {
	ws := benchWorkloads(3000)
	sizes := []int{10, 100, 300, 1000}
	perDecision := map[int]time.Duration{}
	kt := kinds() // the Service's table, made once as New does
	for _, n := range sizes {
		clusters := benchRegion(n)
		decisions := max(200, 200_000/n) // about the same work per size
		start := time.Now()
		for i := range decisions {
			_ = kt.decide(ws[i%len(ws)], clusters, time.Time{}, framework.Options{BufferPercent: 10})
		}
		perDecision[n] = time.Since(start) / time.Duration(decisions)
	}
	b.Logf("%-9s %14s %12s %22s", "clusters", "per decision", "decisions/s", "per cluster vs 100")
	base := float64(perDecision[100]) / 100
	for _, n := range sizes {
		pd := perDecision[n]
		b.Logf("%-9d %14s %12.0f %22.2f", n, pd, float64(time.Second)/float64(pd), float64(pd)/float64(n)/base)
	}
	b.ReportMetric(float64(perDecision[100].Nanoseconds()), "ns/decision@100")
	b.ReportMetric(float64(perDecision[1000].Nanoseconds()), "ns/decision@1000")
}
