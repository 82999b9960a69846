package quota_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/quota"
)

func openBus(tb testing.TB) *bus.Bus {
	tb.Helper()
	b, err := bus.Open(context.Background(), bus.Config{StoreDir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Close)
	return b
}

// replica starts a quota service on its own connection to b's server, as
// another process would have.
func replica(tb testing.TB, b *bus.Bus, name string) *quota.Service {
	tb.Helper()
	c, err := b.Connect(name)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.NC.Close() })
	s := quota.New(c, slog.New(slog.DiscardHandler), quota.Ample())
	if err := s.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Stop() })
	return s
}

func start(tb testing.TB) (*bus.Bus, *quota.Service) {
	tb.Helper()
	b := openBus(tb)
	return b, replica(tb, b, "quota-1")
}

func ledger(t *testing.T, s *quota.Service, project string) *api.Ledger {
	t.Helper()
	l, err := s.Ledger(context.Background(), project)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestTwoReplicasAdmitExactlyWhatTheLimitFits(t *testing.T) {
	b := openBus(t)
	replicas := []*quota.Service{replica(t, b, "quota-1"), replica(t, b, "quota-2")}
	ctx := context.Background()
	// Each workload asks 1 CPU and 1 pod; the limit fits exactly 100.
	if err := replicas[0].SetLimit(ctx, "team", api.TierOnDemand, api.Limit{MilliCPU: new(int64(100_000)), Pods: new(int64(100))}); err != nil {
		t.Fatal(err)
	}
	d := api.Demand{Tier: api.TierOnDemand, MilliCPU: 1000, MemoryBytes: 1 << 30, Pods: 1}
	var wg sync.WaitGroup
	var ok, rejected atomic.Int64
	for i := range 200 {
		wg.Go(func() {
			err := replicas[i%2].Reserve(ctx, "team", fmt.Sprintf("team.app.w%d", i), d)
			var rej *api.QuotaRejection
			switch {
			case err == nil:
				ok.Add(1)
			case errors.As(err, &rej):
				rejected.Add(1)
				if rej.Resource != "cpu" || rej.Limit != 100_000 || rej.Used != 100_000 || rej.Requested != 1000 || rej.Tier != api.TierOnDemand {
					t.Errorf("rejection %+v", rej)
				}
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 100 || rejected.Load() != 100 {
		t.Fatalf("%d reserved, %d rejected; want 100, 100", ok.Load(), rejected.Load())
	}
	l := ledger(t, replicas[1], "team")
	want := api.Demand{Tier: api.TierOnDemand, MilliCPU: 100_000, MemoryBytes: 100 << 30, Pods: 100}
	if diff := cmp.Diff(want, l.Used(api.TierOnDemand)); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	if l.Reservations != 100 {
		t.Errorf("%d reservations, want 100", l.Reservations)
	}
	// Other tiers have no limit set and are not affected.
	if err := replicas[0].Reserve(ctx, "team", "team.app.pre", api.Demand{Tier: api.TierPreemptible, MilliCPU: 1_000_000}); err != nil {
		t.Errorf("preemptible reserve: %v", err)
	}
	for i := range 200 {
		if err := replicas[i%2].Release(ctx, "team", fmt.Sprintf("team.app.w%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	l = ledger(t, replicas[0], "team")
	if diff := cmp.Diff(api.Demand{Tier: api.TierOnDemand}, l.Used(api.TierOnDemand)); diff != "" {
		t.Errorf("usage after release (-want +got):\n%s", diff)
	}
	if l.Reservations != 1 {
		t.Errorf("%d reservations after release, want 1", l.Reservations)
	}
}

func TestUpdatesReleasesAndTierChangesAdjustExactly(t *testing.T) {
	_, s := start(t)
	ctx := context.Background()
	if err := s.SetLimit(ctx, "p", api.TierOnDemand, api.Limit{Pods: new(int64(10))}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLimit(ctx, "p", api.TierReserved, api.Limit{Pods: new(int64(5))}); err != nil {
		t.Fatal(err)
	}
	// Another workload holds 1 OnDemand pod throughout.
	if err := s.Reserve(ctx, "p", "p.app.other", api.Demand{Tier: api.TierOnDemand, Pods: 1}); err != nil {
		t.Fatal(err)
	}
	type used struct{ OnDemand, Reserved, Count int64 }
	tests := []struct {
		name    string
		release bool
		tier    api.Tier
		pods    int64
		wantErr bool
		want    used
	}{
		{name: "first", tier: api.TierOnDemand, pods: 4, want: used{5, 0, 2}},
		{name: "retry", tier: api.TierOnDemand, pods: 4, want: used{5, 0, 2}},
		{name: "scale up", tier: api.TierOnDemand, pods: 9, want: used{10, 0, 2}},
		{name: "scale past limit", tier: api.TierOnDemand, pods: 10, wantErr: true, want: used{10, 0, 2}},
		{name: "scale down", tier: api.TierOnDemand, pods: 2, want: used{3, 0, 2}},
		{name: "to a tier it does not fit", tier: api.TierReserved, pods: 6, wantErr: true, want: used{3, 0, 2}},
		{name: "to another tier", tier: api.TierReserved, pods: 5, want: used{1, 5, 2}},
		{name: "back", tier: api.TierOnDemand, pods: 7, want: used{8, 0, 2}},
		{name: "release", release: true, want: used{1, 0, 1}},
		{name: "release again", release: true, want: used{1, 0, 1}},
		{name: "reserve after release", tier: api.TierReserved, pods: 1, want: used{1, 1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.release {
				err = s.Release(ctx, "p", "p.app.web")
			} else {
				err = s.Reserve(ctx, "p", "p.app.web", api.Demand{Tier: tc.tier, Pods: tc.pods})
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			l := ledger(t, s, "p")
			got := used{l.Used(api.TierOnDemand).Pods, l.Used(api.TierReserved).Pods, l.Reservations}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRejectionNamesTierResourceLimitUsedAndRequested(t *testing.T) {
	_, s := start(t)
	ctx := context.Background()
	lim := api.Limit{MilliCPU: new(int64(4000)), MemoryBytes: new(int64(8 << 30)), GPUs: new(int64(2)), Pods: new(int64(4))}
	if err := s.SetLimit(ctx, "p", api.TierReserved, lim); err != nil {
		t.Fatal(err)
	}
	held := api.Demand{Tier: api.TierReserved, MilliCPU: 1000, MemoryBytes: 2 << 30, GPUs: 1, Pods: 1}
	if err := s.Reserve(ctx, "p", "p.app.held", held); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		key    string
		demand api.Demand
		want   api.QuotaRejection
	}{
		{"cpu", "p.app.a", api.Demand{Tier: api.TierReserved, MilliCPU: 3001},
			api.QuotaRejection{Project: "p", Tier: api.TierReserved, Resource: "cpu", Limit: 4000, Used: 1000, Requested: 3001}},
		{"memory", "p.app.a", api.Demand{Tier: api.TierReserved, MemoryBytes: 7 << 30},
			api.QuotaRejection{Project: "p", Tier: api.TierReserved, Resource: "memory", Limit: 8 << 30, Used: 2 << 30, Requested: 7 << 30}},
		{"gpu", "p.app.a", api.Demand{Tier: api.TierReserved, GPUs: 2},
			api.QuotaRejection{Project: "p", Tier: api.TierReserved, Resource: "nvidia.com/gpu", Limit: 2, Used: 1, Requested: 2}},
		{"pods", "p.app.a", api.Demand{Tier: api.TierReserved, Pods: 4},
			api.QuotaRejection{Project: "p", Tier: api.TierReserved, Resource: "pods", Limit: 4, Used: 1, Requested: 4}},
		{"own holding not counted", "p.app.held", api.Demand{Tier: api.TierReserved, Pods: 5},
			api.QuotaRejection{Project: "p", Tier: api.TierReserved, Resource: "pods", Limit: 4, Used: 0, Requested: 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Reserve(ctx, "p", tc.key, tc.demand)
			var rej *api.QuotaRejection
			if !errors.As(err, &rej) {
				t.Fatalf("err %v, want a rejection", err)
			}
			if diff := cmp.Diff(tc.want, *rej); diff != "" {
				t.Errorf("rejection (-want +got):\n%s", diff)
			}
		})
	}
	if diff := cmp.Diff(held, ledger(t, s, "p").Used(api.TierReserved)); diff != "" {
		t.Errorf("usage after rejections (-want +got):\n%s", diff)
	}
}

func TestGetRepliesWithLimitsAndUsage(t *testing.T) {
	b, s := start(t)
	ctx := context.Background()
	if err := s.SetLimit(ctx, "p", api.TierOnDemand, api.Limit{Pods: new(int64(10))}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.Reserve(ctx, "p", fmt.Sprintf("p.app.w%d", i), api.Demand{Tier: api.TierOnDemand, Pods: 2}); err != nil {
			t.Fatal(err)
		}
	}
	req, _ := json.Marshal(api.QuotaRelease{Project: "p"})
	reply, err := b.NC.Request(bus.QuotaGet.Subject(), req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var l api.Ledger
	if err := json.Unmarshal(reply.Data, &l); err != nil {
		t.Fatal(err)
	}
	want := api.Ledger{Project: "p", Limits: map[api.Tier]api.Limit{api.TierOnDemand: {Pods: new(int64(10))}},
		Usage: map[api.Tier]api.Demand{api.TierOnDemand: {Tier: api.TierOnDemand, Pods: 6}}, Reservations: 3, Seq: 3}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("get reply (-want +got):\n%s", diff)
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
	// The sweep works from its watch of the bucket: poll until it has seen both.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, func() error {
			if err := s.SweepOnce(ctx, 0); err != nil {
				return err
			}
			if l := ledger(t, s, "p"); l.Reservations != 1 || l.Used(api.TierOnDemand).Pods != 1 {
				return fmt.Errorf("%d reservations, %d pods; want 1, 1", l.Reservations, l.Used(api.TierOnDemand).Pods)
			}
			return nil
		}())
	}, 5*time.Second, 20*time.Millisecond)
	qkv, _ := b.KV(ctx, bus.BucketQuota)
	if _, err := qkv.Get(ctx, api.QuotaReservationKey("p", "p.app.kept")); err != nil {
		t.Errorf("live workload's reservation: %v", err)
	}
	if _, err := qkv.Get(ctx, api.QuotaReservationKey("p", "p.app.orphan")); err == nil {
		t.Error("orphan kept")
	}
}

func TestLedgerOfThePreviousLayoutIsMigrated(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	kv, err := b.KV(ctx, bus.BucketQuota)
	if err != nil {
		t.Fatal(err)
	}
	legacy := `{"project":"old","limits":{"OnDemand":{"pods":5}},"reservations":{
		"old.app.a":{"demand":{"tier":"OnDemand","milliCPU":1000,"pods":2},"at":"2026-01-02T03:04:05Z"},
		"old.app.b":{"demand":{"tier":"Reserved","pods":1},"at":"2026-01-02T03:04:05Z"}}}`
	if _, err := kv.Put(ctx, "old", []byte(legacy)); err != nil {
		t.Fatal(err)
	}
	s := replica(t, b, "quota-1")
	l := ledger(t, s, "old")
	want := &api.Ledger{Project: "old", Limits: map[api.Tier]api.Limit{api.TierOnDemand: {Pods: new(int64(5))}},
		Usage: map[api.Tier]api.Demand{
			api.TierOnDemand: {Tier: api.TierOnDemand, MilliCPU: 1000, Pods: 2},
			api.TierReserved: {Tier: api.TierReserved, Pods: 1},
		}, Reservations: 2}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("migrated ledger (-want +got):\n%s", diff)
	}
	if _, err := kv.Get(ctx, "old"); err == nil {
		t.Error("legacy key kept")
	}
	// The migrated reservations count: 2 of 5 pods held, so 4 more do not fit.
	var rej *api.QuotaRejection
	if err := s.Reserve(ctx, "old", "old.app.c", api.Demand{Tier: api.TierOnDemand, Pods: 4}); !errors.As(err, &rej) || rej.Used != 2 {
		t.Errorf("reserve past the migrated limit: %v", err)
	}
	if err := s.Release(ctx, "old", "old.app.a"); err != nil {
		t.Fatal(err)
	}
	if u := ledger(t, s, "old").Used(api.TierOnDemand); u.Pods != 0 || u.MilliCPU != 0 {
		t.Errorf("usage after releasing the migrated reservation: %+v", u)
	}
}
