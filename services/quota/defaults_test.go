package quota_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/quota"
)

// startWith starts a quota service with cfg.
func startWith(t *testing.T, cfg *quota.Config) (*bus.Bus, *quota.Service) {
	t.Helper()
	b := openBus(t)
	s := quota.New(b, slog.New(slog.DiscardHandler), cfg)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return b, s
}

// small is a policy of small OnDemand caps, no GPUs, nothing Reserved
// (left out: forbidden) and three workloads per project.
func small(t *testing.T) *quota.Config {
	t.Helper()
	lim, err := quota.ParseLimits("OnDemand:cpu=2,memory=4Gi,gpus=0,pods=3,storage=10Gi; Preemptible:cpu=1,memory=1Gi,gpus=8,pods=1,storage=1Gi")
	if err != nil {
		t.Fatal(err)
	}
	return &quota.Config{Defaults: api.QuotaDefaults{Limits: lim, MaxWorkloads: 3}}
}

func TestProjectWithoutLimitsGetsTheDefaults(t *testing.T) {
	_, s := startWith(t, small(t))
	ctx := context.Background()
	tests := []struct {
		name   string
		demand api.Demand
		want   *api.QuotaRejection // nil: reserved
	}{
		{"within the default", api.Demand{Tier: api.TierOnDemand, MilliCPU: 2000, MemoryBytes: 4 << 30, Pods: 3, StorageBytes: 10 << 30}, nil},
		{"cpu over the default", api.Demand{Tier: api.TierOnDemand, MilliCPU: 2001},
			&api.QuotaRejection{Project: "new", Tier: api.TierOnDemand, Resource: "cpu", Limit: 2000, Requested: 2001}},
		{"storage over the default", api.Demand{Tier: api.TierOnDemand, StorageBytes: 10<<30 + 1},
			&api.QuotaRejection{Project: "new", Tier: api.TierOnDemand, Resource: "storage", Limit: 10 << 30, Requested: 10<<30 + 1}},
		{"GPU with a default of 0", api.Demand{Tier: api.TierOnDemand, GPUs: 1},
			&api.QuotaRejection{Project: "new", Tier: api.TierOnDemand, Resource: "nvidia.com/gpu", Limit: 0, Requested: 1}},
		{"a tier the defaults leave out", api.Demand{Tier: api.TierReserved, MilliCPU: 1, Pods: 1},
			&api.QuotaRejection{Project: "new", Tier: api.TierReserved, Resource: "cpu", Limit: 0, Requested: 1}},
		{"GPUs another tier allows", api.Demand{Tier: api.TierPreemptible, GPUs: 8, Pods: 1}, nil},
		{"nothing of a forbidden tier", api.Demand{Tier: api.TierReserved}, nil},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("new.app.w%d", i)
			err := s.Reserve(ctx, "new", key, tc.demand)
			var rej *api.QuotaRejection
			errors.As(err, &rej)
			if diff := cmp.Diff(tc.want, rej); diff != "" {
				t.Errorf("rejection (-want +got):\n%s", diff)
			}
			if tc.want == nil && err != nil {
				t.Errorf("reserve: %v", err)
			}
			if err == nil {
				if err := s.Release(ctx, "new", key); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestExplicitZeroForbidsAndUnsetFollowsTheDefault(t *testing.T) {
	_, s := startWith(t, small(t))
	ctx := context.Background()
	// Preemptible: GPUs set to 0 (the default allows 8), pods raised, the
	// rest left to the default.
	if err := s.SetLimit(ctx, "p", api.TierPreemptible, api.Limit{GPUs: new(int64(0)), Pods: new(int64(50))}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		demand   api.Demand
		resource string // "": reserved
	}{
		{"explicit 0 forbids GPUs", api.Demand{Tier: api.TierPreemptible, GPUs: 1, Pods: 1}, "nvidia.com/gpu"},
		{"explicit pods above the default", api.Demand{Tier: api.TierPreemptible, Pods: 2}, ""},
		{"unset cpu follows the default", api.Demand{Tier: api.TierPreemptible, MilliCPU: 1001}, "cpu"},
		{"other tiers keep their default", api.Demand{Tier: api.TierOnDemand, Pods: 4}, "pods"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Reserve(ctx, "p", fmt.Sprintf("p.app.w%d", i), tc.demand)
			var rej *api.QuotaRejection
			got := ""
			if errors.As(err, &rej) {
				got = rej.Resource
			} else if err != nil {
				t.Fatal(err)
			}
			if got != tc.resource {
				t.Errorf("refused for %q (%v), want %q", got, err, tc.resource)
			}
		})
	}
}

func TestZeroRejectionSaysNoneIsAllowed(t *testing.T) {
	rej := &api.QuotaRejection{Project: "p", Tier: api.TierOnDemand, Resource: "nvidia.com/gpu", Requested: 1}
	if want := "quota of project p, tier OnDemand, allows no nvidia.com/gpu (limit 0), requested 1; ask a platform admin for a quota"; rej.Error() != want {
		t.Errorf("message %q, want %q", rej.Error(), want)
	}
}

func TestShrinkingIsNeverRefused(t *testing.T) {
	_, s := startWith(t, quota.Ample())
	ctx := context.Background()
	if err := s.Reserve(ctx, "p", "p.app.web", api.Demand{Tier: api.TierOnDemand, MilliCPU: 8000, Pods: 8}); err != nil {
		t.Fatal(err)
	}
	// The cap is lowered below what the project holds.
	if err := s.SetLimit(ctx, "p", api.TierOnDemand, api.Limit{Pods: new(int64(4))}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		demand  api.Demand
		refused bool
	}{
		{"grow", api.Demand{Tier: api.TierOnDemand, MilliCPU: 8000, Pods: 9}, true},
		{"shrink, still over", api.Demand{Tier: api.TierOnDemand, MilliCPU: 8000, Pods: 6}, false},
		{"more cpu, fewer pods", api.Demand{Tier: api.TierOnDemand, MilliCPU: 9000, Pods: 5}, false},
		{"stop", api.Demand{Tier: api.TierOnDemand}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Reserve(ctx, "p", "p.app.web", tc.demand)
			var rej *api.QuotaRejection
			if refused := errors.As(err, &rej); refused != tc.refused || (!refused && err != nil) {
				t.Errorf("reserve %+v: %v, want refused %v", tc.demand, err, tc.refused)
			}
		})
	}
}

func TestWorkloadCap(t *testing.T) {
	b, s := startWith(t, small(t))
	ctx := context.Background()
	for i := range 3 {
		if err := s.Reserve(ctx, "p", fmt.Sprintf("p.app.w%d", i), api.Demand{Tier: api.TierOnDemand}); err != nil {
			t.Fatal(err)
		}
	}
	// Over the bus, as admission asks: 422, naming the cap.
	req, _ := json.Marshal(api.QuotaReserve{Project: "p", Key: "p.app.w3", Demand: api.Demand{Tier: api.TierOnDemand}})
	reply, err := b.NC.Request(bus.QuotaReserve.Subject(), req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "422" {
		t.Errorf("status %q, want 422 (%s)", code, reply.Data)
	}
	var body api.ErrorBody
	if err := json.Unmarshal(reply.Data, &body); err != nil {
		t.Fatal(err)
	}
	wantRej := &api.QuotaRejection{Project: "p", Tier: api.TierOnDemand, Resource: "workloads", Limit: 3, Used: 3, Requested: 1}
	if body.Code != "TooManyWorkloads" || !cmp.Equal(body.Quota, wantRej) {
		t.Errorf("body %+v, want TooManyWorkloads with %+v", body, wantRej)
	}
	if want := "project p holds 3 workloads, the most a project may hold; delete workloads it no longer needs, or ask a platform admin"; body.Message != want {
		t.Errorf("message %q, want %q", body.Message, want)
	}
	// A workload already held may change; after a release a new one fits.
	if err := s.Reserve(ctx, "p", "p.app.w0", api.Demand{Tier: api.TierOnDemand, Pods: 1}); err != nil {
		t.Errorf("update at the cap: %v", err)
	}
	if err := s.Release(ctx, "p", "p.app.w1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(ctx, "p", "p.app.w3", api.Demand{Tier: api.TierOnDemand}); err != nil {
		t.Errorf("new workload after a release: %v", err)
	}
	if l := ledger(t, s, "p"); l.Reservations != 3 {
		t.Errorf("%d reservations, want 3", l.Reservations)
	}
}

func TestStorageIsCounted(t *testing.T) {
	_, s := startWith(t, quota.Ample())
	ctx := context.Background()
	if err := s.SetLimit(ctx, "p", api.TierOnDemand, api.Limit{StorageBytes: new(int64(10 << 30))}); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(ctx, "p", "p.app.a", api.Demand{Tier: api.TierOnDemand, Pods: 2, StorageBytes: 6 << 30}); err != nil {
		t.Fatal(err)
	}
	err := s.Reserve(ctx, "p", "p.app.b", api.Demand{Tier: api.TierOnDemand, Pods: 1, StorageBytes: 5 << 30})
	var rej *api.QuotaRejection
	if !errors.As(err, &rej) || rej.Resource != "storage" || rej.Used != 6<<30 {
		t.Errorf("second reserve: %v, want a storage rejection with 6Gi used", err)
	}
	if err := s.Release(ctx, "p", "p.app.a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(ctx, "p", "p.app.b", api.Demand{Tier: api.TierOnDemand, Pods: 1, StorageBytes: 5 << 30}); err != nil {
		t.Errorf("after the release: %v", err)
	}
	if got := ledger(t, s, "p").Used(api.TierOnDemand).StorageBytes; got != 5<<30 {
		t.Errorf("storage used %d, want %d", got, 5<<30)
	}
}

func TestDefaultsArePublished(t *testing.T) {
	cfg := small(t)
	b, _ := startWith(t, cfg)
	ctx := context.Background()
	kv, err := b.KV(ctx, bus.BucketQuota)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, api.QuotaDefaultsKey)
	if err != nil {
		t.Fatal(err)
	}
	var got api.QuotaDefaults
	if err := json.Unmarshal(e.Value(), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cfg.Defaults, got); diff != "" {
		t.Errorf("published defaults (-want +got):\n%s", diff)
	}
}

func TestParseLimits(t *testing.T) {
	gi := int64(1 << 30)
	tests := []struct {
		name string
		in   string
		want api.Resolved // of OnDemand
		err  bool
	}{
		{"every resource", "OnDemand:cpu=1500m,memory=2Gi,gpus=1,pods=10,storage=3Gi",
			api.Resolved{MilliCPU: 1500, MemoryBytes: 2 * gi, GPUs: 1, Pods: 10, StorageBytes: 3 * gi}, false},
		{"left out is 0", "ondemand:cpu=2", api.Resolved{MilliCPU: 2000}, false},
		{"tier left out is 0", "Reserved:cpu=2", api.Resolved{}, false},
		{"gpu by its Kubernetes name", "OnDemand:nvidia.com/gpu=4", api.Resolved{GPUs: 4}, false},
		{"unknown tier", "Spot:cpu=1", api.Resolved{}, true},
		{"unknown resource", "OnDemand:disk=1", api.Resolved{}, true},
		{"negative", "OnDemand:cpu=-1", api.Resolved{}, true},
		{"no amount", "OnDemand:cpu", api.Resolved{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := quota.ParseLimits(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want error %v", err, tc.err)
			}
			if err != nil {
				return
			}
			got := api.QuotaDefaults{Limits: lim}.Resolve(api.TierOnDemand, nil)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("OnDemand caps (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuiltInDefaultsAreFinite(t *testing.T) {
	d := quota.DefaultConfig().Defaults
	if d.MaxWorkloads != 10_000 {
		t.Errorf("workload cap %d, want 10000", d.MaxWorkloads)
	}
	for _, tier := range api.Tiers {
		lim := d.Limits[tier]
		for name, v := range map[string]*int64{"cpu": lim.MilliCPU, "memory": lim.MemoryBytes, "gpus": lim.GPUs, "pods": lim.Pods, "storage": lim.StorageBytes} {
			if v == nil {
				t.Errorf("%s %s: unset", tier, name)
			}
		}
	}
	if c := d.Resolve(api.TierOnDemand, nil); c.GPUs != 0 || c.Pods == 0 {
		t.Errorf("OnDemand defaults %+v: want no GPUs and some pods", c)
	}
	if c := d.Resolve(api.TierReserved, nil); c != (api.Resolved{}) {
		t.Errorf("Reserved defaults %+v: want nothing", c)
	}
}

func TestFormatLimitsRoundTrips(t *testing.T) {
	for _, cfg := range []*quota.Config{quota.DefaultConfig(), quota.Ample()} {
		back, err := quota.ParseLimits(quota.FormatLimits(cfg.Defaults.Limits))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(cfg.Defaults.Limits, back); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}
