package quota_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/quota"
)

func start(t *testing.T) (*bus.Bus, *quota.Service) {
	t.Helper()
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	s := quota.New(b, slog.Default())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return b, s
}

func TestConcurrentReservesStopAtTheLimit(t *testing.T) {
	_, s := start(t)
	ctx := context.Background()
	// Each workload asks 1 CPU; the limit fits exactly 20.
	if err := s.SetLimit(ctx, "team", api.TierOnDemand, api.Limit{MilliCPU: 20000}); err != nil {
		t.Fatal(err)
	}
	d := api.Demand{Tier: api.TierOnDemand, MilliCPU: 1000, MemoryBytes: 1 << 30, Pods: 1}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, rejected int
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Reserve(ctx, "team", fmt.Sprintf("team.app.w%d", i), d)
			mu.Lock()
			defer mu.Unlock()
			var rej *api.QuotaRejection
			switch {
			case err == nil:
				ok++
			case errors.As(err, &rej):
				rejected++
				if rej.Resource != "cpu" || rej.Limit != 20000 || rej.Requested != 1000 || rej.Tier != api.TierOnDemand {
					t.Errorf("rejection %+v", rej)
				}
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok != 20 || rejected != 30 {
		t.Fatalf("%d reserved, %d rejected; want 20, 30", ok, rejected)
	}
	l, err := s.Ledger(ctx, "team")
	if err != nil {
		t.Fatal(err)
	}
	if u := l.Used(api.TierOnDemand); u.MilliCPU != 20000 || u.Pods != 20 {
		t.Errorf("used %+v", u)
	}
	// Other tiers have no limit set and are not affected.
	if err := s.Reserve(ctx, "team", "team.app.pre", api.Demand{Tier: api.TierPreemptible, MilliCPU: 100000}); err != nil {
		t.Errorf("preemptible reserve: %v", err)
	}
	for i := range 50 {
		if err := s.Release(ctx, "team", fmt.Sprintf("team.app.w%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	l, _ = s.Ledger(ctx, "team")
	if diff := cmp.Diff(api.Demand{Tier: api.TierOnDemand}, l.Used(api.TierOnDemand)); diff != "" {
		t.Errorf("usage after release (-want +got):\n%s", diff)
	}
}

func TestReserveIsIdempotentAndUpdatesAdjustExactly(t *testing.T) {
	_, s := start(t)
	ctx := context.Background()
	if err := s.SetLimit(ctx, "p", api.TierOnDemand, api.Limit{Pods: 10}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		pods     int64
		wantErr  bool
		wantUsed int64
	}{
		{"first", 4, false, 4},
		{"retry", 4, false, 4},
		{"scale up", 9, false, 9},
		{"scale past limit", 11, true, 9},
		{"scale down", 2, false, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Reserve(ctx, "p", "p.app.web", api.Demand{Tier: api.TierOnDemand, Pods: tc.pods})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			l, _ := s.Ledger(ctx, "p")
			if got := l.Used(api.TierOnDemand).Pods; got != tc.wantUsed {
				t.Errorf("used pods %d, want %d", got, tc.wantUsed)
			}
		})
	}
}

func TestOrphanedReservationIsReturned(t *testing.T) {
	b, s := start(t)
	ctx := context.Background()
	kv, _ := b.KV(ctx, bus.BucketWorkloads)
	if _, err := kv.Put(ctx, "p.app.kept", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"p.app.kept", "p.app.orphan"} {
		if err := s.Reserve(ctx, "p", k, api.Demand{Tier: api.TierOnDemand, Pods: 1}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	if err := s.SweepOnce(ctx, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	l, _ := s.Ledger(ctx, "p")
	if _, ok := l.Reservations["p.app.orphan"]; ok {
		t.Error("orphan kept")
	}
	if _, ok := l.Reservations["p.app.kept"]; !ok {
		t.Error("live workload's reservation released")
	}
}
