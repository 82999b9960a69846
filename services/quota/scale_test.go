package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// TestProjectHolds60000Reservations fills one project through Reserve and
// compares the cost of the first and the last thousand reserves.
func TestProjectHolds60000Reservations(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a project with 60,000 reservations")
	}
	const n, window = 60_000, 1000
	b := openBus(t)
	s := newReplica(t, b, "quota-1", nil)
	ctx := context.Background()
	if err := s.SetLimit(ctx, "big", api.TierOnDemand, api.Limit{Pods: new(int64(n))}); err != nil {
		t.Fatal(err)
	}
	d := api.Demand{Tier: api.TierOnDemand, MilliCPU: 10, MemoryBytes: 1 << 20, Pods: 1}
	reserve := func(i int) {
		if err := s.Reserve(ctx, "big", fmt.Sprintf("big.app.w%05d", i), d); err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
	}
	timed := func(from int) time.Duration {
		t0 := time.Now()
		for i := from; i < from+window; i++ {
			reserve(i)
		}
		return time.Since(t0)
	}
	first := timed(0)
	fill(t, s, "big", window, n-window, d) // the middle concurrently, as admission's requests come
	last := timed(n - window)
	ratio := float64(last) / float64(first)
	t.Logf("first %d reserves: %v (%v each); last %d: %v (%v each); last/first %.2f",
		window, first, first/window, window, last, last/window, ratio)

	l := ledgerOf(t, s, "big")
	want := api.Demand{Tier: api.TierOnDemand, MilliCPU: 10 * n, MemoryBytes: n << 20, Pods: n}
	if diff := cmp.Diff(want, l.Used(api.TierOnDemand)); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	if l.Reservations != n {
		t.Errorf("%d reservations, want %d", l.Reservations, n)
	}
	kv, _ := b.KV(ctx, bus.BucketQuota)
	e, err := kv.Get(ctx, api.QuotaProjectKey("big"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("project document: %d bytes", len(e.Value()))
	if len(e.Value()) > 4096 {
		t.Errorf("project document is %d bytes, want at most 4 KiB", len(e.Value()))
	}
	// Full, the project refuses one more.
	var rej *api.QuotaRejection
	if err := s.Reserve(ctx, "big", "big.app.one-more", d); !errors.As(err, &rej) || rej.Used != n {
		t.Errorf("reserve past the limit: %v", err)
	}
	// A reserve's cost does not grow with the project: generous bound, an
	// O(n) reserve would be ~60 times slower at the end.
	if ratio > 4 {
		t.Errorf("the last reserves took %.1f times as long as the first", ratio)
	}
}

// fill reserves d for keys <project>.app.w<from> to w<to-1>, eight at a
// time.
func fill(tb testing.TB, s *Service, project string, from, to int, d api.Demand) {
	tb.Helper()
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := s.Reserve(context.Background(), project, fmt.Sprintf("%s.app.w%05d", project, i), d); err != nil {
					tb.Errorf("reserve %d: %v", i, err)
				}
			}
		})
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
}

// BenchmarkReserveAtSize measures reserves in a project that already
// holds 100 reservations and in one that holds 10,000, batch after batch
// in turn so that both see the same machine, and reports the time of one
// reserve at each size and their ratio. Each batch adds its reservations.
func BenchmarkReserveAtSize(b *testing.B) {
	const batch = 200
	sizes := []int{100, 10_000}
	ctx := context.Background()
	d := api.Demand{Tier: api.TierOnDemand, MilliCPU: 10, Pods: 1}
	services := make([]*Service, len(sizes))
	for i, size := range sizes {
		services[i] = newReplica(b, openBus(b), "quota-1", nil)
		if err := services[i].SetLimit(ctx, "p", api.TierOnDemand, api.Limit{Pods: new(int64(1 << 40))}); err != nil {
			b.Fatal(err)
		}
		fill(b, services[i], "p", 0, size, d)
	}
	spent := make([]time.Duration, len(sizes))
	n := 0
	for b.Loop() {
		for i, s := range services {
			t0 := time.Now()
			for k := range batch {
				if err := s.Reserve(ctx, "p", fmt.Sprintf("p.app.bench%d", n+k), d); err != nil {
					b.Fatal(err)
				}
			}
			spent[i] += time.Since(t0)
		}
		n += batch
	}
	for i, size := range sizes {
		b.ReportMetric(float64(spent[i].Nanoseconds())/float64(n), fmt.Sprintf("ns/reserve@%d", size))
	}
	b.ReportMetric(float64(spent[1])/float64(spent[0]), fmt.Sprintf("ratio@%d/@%d", sizes[1], sizes[0]))
}
