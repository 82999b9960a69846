package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
	"atoll.dev/services/scheduler"
)

// inventory writes n healthy clusters over zones a, b and c, each with
// one shared pool of nodes nodes of 32 cores (110 pods each) and, when
// reservedNodes > 0, a Reserved pool; computed before any decision.
func inventory(tb testing.TB, b *bus.Bus, n, nodes, reservedNodes int) {
	tb.Helper()
	k := kv(tb, b, bus.BucketClusters)
	pool := func(nodes int, tier string) api.PoolInfo {
		m := int64(nodes)
		return api.PoolInfo{
			Nodes: nodes, ReadyNodes: nodes, Tier: tier,
			Allocatable:     api.Quantities{MilliCPU: 32000 * m, MemoryBytes: m * (128 << 30)},
			AllocatablePods: 110 * m,
			MaxNodeFree:     api.Quantities{MilliCPU: 32000, MemoryBytes: 128 << 30},
		}
	}
	for i := range n {
		ci := api.ClusterInfo{
			Name: fmt.Sprintf("c%04d", i), Zone: string(rune('a' + i%3)), Healthy: true, Updated: time.Now().Add(-time.Hour).UTC(),
			Pools: map[string]api.PoolInfo{"general": pool(nodes, api.PoolTierShared)},
		}
		if reservedNodes > 0 {
			ci.Pools["reserved"] = pool(reservedNodes, api.PoolTierReserved)
		}
		body, err := json.Marshal(&ci)
		require.NoError(tb, err)
		_, err = k.Put(context.Background(), ci.Name, body)
		require.NoError(tb, err)
	}
}

// startScheduler starts one scheduler replica with opts and waits until it leads.
func startScheduler(tb testing.TB, b *bus.Bus, opts scheduler.Options) *scheduler.Service {
	tb.Helper()
	conn, err := b.Connect("scheduler")
	require.NoError(tb, err)
	tb.Cleanup(conn.Close)
	s := scheduler.New(conn, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	s.Options = opts
	require.NoError(tb, s.Start(context.Background()))
	tb.Cleanup(s.Stop)
	require.Eventually(tb, s.Leading, 20*time.Second, 5*time.Millisecond)
	return s
}

// countPuts counts the writes to the placements bucket from now on.
func countPuts(tb testing.TB, b *bus.Bus) *atomic.Int64 {
	tb.Helper()
	w, err := kv(tb, b, bus.BucketPlacements).WatchAll(context.Background(), jetstream.UpdatesOnly())
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = w.Stop() })
	var n atomic.Int64
	go func() {
		for e := range w.Updates() {
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				n.Add(1)
			}
		}
	}()
	return &n
}

// BenchmarkServiceDecisions measures scheduling decisions per second
// through the scheduler service on embedded NATS: 10,000 pending Apps of
// mixed tiers (1 to 5 replicas) are in the workloads bucket with their
// admitted events, the inventory holds 100 or 1,000 clusters; a
// scheduler starts and the clock runs from its lease to the 10,000th
// placement written (mirror watch → queue → decide → compare-and-set →
// scheduled event). It prints decisions/s and the cost per decision per
// cluster against 100 clusters in the same run. Then, on a region full
// of Preemptible work, it times Reserved submissions that need a
// preemption, from the write to their placement (P50, P99).
//
//	go test -run '^$' -bench BenchmarkServiceDecisions -benchtime 1x -timeout 30m .
func BenchmarkServiceDecisions(b *testing.B) {
	const pending = 10_000
	tiers := []api.Tier{api.TierPreemptible, api.TierOnDemand, api.TierPreemptible, api.TierReserved}
	sizes := []int{100, 1000}
	if one, err := strconv.Atoi(os.Getenv("ATOLL_BENCH_SCHED_CLUSTERS")); err == nil { // profiling one size
		sizes = []int{one}
	}
	elapsed := map[int]time.Duration{}
	for _, n := range sizes {
		bb := openBus(b)
		inventory(b, bb, n, 500, 50)
		pub := events.NewPublisher(bb, nil, events.Options{})
		for i := range pending {
			write(b, bb, pub, tieredApp(fmt.Sprintf("w%05d", i), tiers[i%len(tiers)], int32(1+i%5), int32(i%7)))
		}
		puts := countPuts(b, bb)
		runtime.GC() // the setup's garbage is not the subject
		startScheduler(b, bb, scheduler.Options{})
		start := time.Now()
		deadline := start.Add(10 * time.Minute)
		for puts.Load() < pending && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling the counter is the subject's clock
		}
		require.GreaterOrEqual(b, puts.Load(), int64(pending), "placements written")
		elapsed[n] = time.Since(start)
		bb.Close()
	}
	b.Logf("%-9s %10s %14s %12s %22s", "clusters", "decisions", "elapsed", "decisions/s", "per cluster vs first")
	base := float64(elapsed[sizes[0]]) / float64(sizes[0])
	for _, n := range sizes {
		e := elapsed[n]
		b.Logf("%-9d %10d %14s %12.0f %22.2f", n, pending, e.Round(time.Millisecond), float64(pending)/e.Seconds(), float64(e)/float64(n)/base)
		b.ReportMetric(float64(pending)/e.Seconds(), fmt.Sprintf("decisions/s@%d", n))
	}

	// Reserved submissions that need a preemption: 100 clusters of one
	// 32-core node, full of one-core Preemptible Apps.
	bb := openBus(b)
	inventory(b, bb, 100, 1, 0)
	pub := events.NewPublisher(bb, nil, events.Options{})
	for i := range 100 * 32 {
		write(b, bb, pub, tieredApp(fmt.Sprintf("fill%04d", i), api.TierPreemptible, 1, 0))
	}
	puts := countPuts(b, bb)
	startScheduler(b, bb, scheduler.Options{})
	for puts.Load() < 100*32 {
		time.Sleep(10 * time.Millisecond) // polling the counter is the subject's clock
	}
	placementsKV := kv(b, bb, bus.BucketPlacements)
	var lat []time.Duration
	for i := range 40 {
		w := tieredApp(fmt.Sprintf("urgent%02d", i), api.TierReserved, 2, 0)
		start := time.Now()
		key := write(b, bb, pub, w)
		for {
			e, err := placementsKV.Get(context.Background(), key)
			if err == nil {
				var d api.PlacementDecision
				require.NoError(b, json.Unmarshal(e.Value(), &d))
				if len(d.Shards) > 0 {
					break
				}
			}
			time.Sleep(time.Millisecond) // polling the placement is the subject's clock
		}
		lat = append(lat, time.Since(start))
		time.Sleep(250 * time.Millisecond) // paced below the preemption rate bound (5/s): it is not the subject here
	}
	preempted := 0
	for _, d := range placements(b, bb) {
		if d.PreemptedBy != "" {
			preempted++
		}
	}
	require.Equal(b, 2*len(lat), preempted, "each Reserved App of 2 preempted 2 one-pod Apps")
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	b.Logf("Reserved submission to placement with preemption (100 full clusters, %d submissions): P50 %v, P99 %v", len(lat), p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond))
	b.ReportMetric(float64(p50.Microseconds())/1000, "preempt-P50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "preempt-P99-ms")
}
