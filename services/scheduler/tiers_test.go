package scheduler

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	ft "atoll.dev/services/scheduler/framework/frameworktest"
)

// pooled returns a cluster with a shared pool of shared 32-core nodes and
// a Reserved pool of reserved ones, none used.
func pooled(name, zone string, shared, reserved int) *api.ClusterInfo {
	c := ft.Cluster(name, zone, shared, 0)
	if shared == 0 {
		delete(c.Pools, "general")
	}
	if reserved > 0 {
		r := ft.Cluster(name, zone, reserved, 0).Pools["general"]
		r.Tier = api.PoolTierReserved
		c.Pools["reserved"] = r
	}
	return c
}

func tiered(tier api.Tier, replicas int32) *api.Workload {
	w := app(replicas, nil)
	w.Spec.(*api.AppSpec).Tier = tier
	return w
}

func TestPoolsPerTier(t *testing.T) {
	mixed := []*api.ClusterInfo{pooled("mixed", "a", 1, 1)}
	sharedOnly := []*api.ClusterInfo{pooled("shared", "a", 1, 0)}
	reservedOnly := []*api.ClusterInfo{pooled("reserved", "a", 0, 1)}
	tests := []struct {
		name     string
		w        *api.Workload
		clusters []*api.ClusterInfo
		opts     framework.Options
		wantPool string // PoolTier of the one shard; "-" when unschedulable
		wantWhy  string // part of the rejection when unschedulable
	}{
		{"Reserved goes to the Reserved pools of a cluster that has them", tiered(api.TierReserved, 2), mixed, framework.Options{}, api.PoolTierReserved, ""},
		{"Reserved uses shared pools where a cluster has no Reserved pool", tiered(api.TierReserved, 2), sharedOnly, framework.Options{}, api.PoolTierShared, ""},
		{"OnDemand goes to shared pools", tiered(api.TierOnDemand, 2), mixed, framework.Options{}, api.PoolTierShared, ""},
		{"OnDemand never uses Reserved pools", tiered(api.TierOnDemand, 2), reservedOnly, framework.Options{}, "-", "no pools for OnDemand work on shared pools"},
		{"Preemptible stays off Reserved pools by default", tiered(api.TierPreemptible, 2), reservedOnly, framework.Options{}, "-", "no pools for Preemptible"},
		{"Preemptible may use idle Reserved pools when allowed", tiered(api.TierPreemptible, 2), reservedOnly, framework.Options{PreemptibleOnReserved: true}, api.PoolTierReserved, ""},
		{"Preemptible prefers shared room when allowed on both", tiered(api.TierPreemptible, 2), mixed, framework.Options{PreemptibleOnReserved: true}, api.PoolTierShared, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideWith(tc.w, tc.clusters, time.Time{}, tc.opts).Decision
			got := "-"
			if len(d.Shards) == 1 {
				got = d.Shards[0].PoolTier
			}
			if got != tc.wantPool {
				t.Fatalf("pool %q, want %q (decision %+v)", got, tc.wantPool, d)
			}
			if tc.wantWhy != "" && (len(d.Reasons) == 0 || !strings.Contains(d.Reasons[0].Reason, tc.wantWhy)) {
				t.Errorf("reasons %+v, want one saying %q", d.Reasons, tc.wantWhy)
			}
		})
	}
}

func TestBuffer(t *testing.T) {
	// One 32-core node with 28 cores used: 4 free. A 20% buffer keeps
	// 6.4 cores: OnDemand and Preemptible see none free, Reserved sees 4.
	busy := func() *api.ClusterInfo {
		c := ft.Cluster("busy", "a", 1, 28)
		c.Labels = map[string]string{api.LabelBufferPercent: "20"}
		return c
	}
	idle := ft.Cluster("idle", "b", 1, 0)
	tests := []struct {
		name     string
		tier     api.Tier
		clusters []*api.ClusterInfo
		want     map[string]int32 // replicas by cluster; nil: unschedulable
	}{
		{"OnDemand avoids the buffer and goes elsewhere", api.TierOnDemand, []*api.ClusterInfo{busy(), idle}, map[string]int32{"idle": 2}},
		{"OnDemand waits rather than eat the buffer", api.TierOnDemand, []*api.ClusterInfo{busy()}, nil},
		{"Preemptible waits rather than eat the buffer", api.TierPreemptible, []*api.ClusterInfo{busy()}, nil},
		{"Reserved may use the buffer", api.TierReserved, []*api.ClusterInfo{busy()}, map[string]int32{"busy": 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideWith(tiered(tc.tier, 2), tc.clusters, time.Time{}, framework.Options{}).Decision
			var got map[string]int32
			if !d.Unschedulable {
				got = map[string]int32{}
				for _, s := range d.Shards {
					got[s.Cluster] = s.Replicas
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("shards (-want +got):\n%s reasons %+v", diff, d.Reasons)
			}
		})
	}
	// The default buffer applies where a cluster has no label of its own.
	c := ft.Cluster("c", "a", 1, 28)
	if got := framework.CapacityOf(api.TierOnDemand, c, framework.Options{BufferPercent: 20}).PodsThatFit(pod); got != 0 {
		t.Errorf("OnDemand room under the default buffer: %d, want 0", got)
	}
}

func TestSortKeyOrdersTheQueue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type item struct {
		key      string
		tier     api.Tier
		priority int32
		admitted time.Time
	}
	items := []item{
		{"p.app.pre-early", api.TierPreemptible, 0, t0},
		{"p.app.od-low", api.TierOnDemand, 0, t0},
		{"p.app.res-late", api.TierReserved, 0, t0.Add(time.Hour)},
		{"p.app.od-high", api.TierOnDemand, 10, t0.Add(time.Hour)},
		{"p.app.res-early", api.TierReserved, 0, t0},
		{"p.app.pre-high", api.TierPreemptible, 1000, t0.Add(2 * time.Hour)},
		{"p.app.od-low-b", api.TierOnDemand, 0, t0},
	}
	slices.SortFunc(items, func(a, b item) int {
		return strings.Compare(SortKey(a.tier, a.priority, a.admitted, a.key), SortKey(b.tier, b.priority, b.admitted, b.key))
	})
	var got []string
	for _, it := range items {
		got = append(got, it.key)
	}
	want := []string{"p.app.res-early", "p.app.res-late", "p.app.od-high", "p.app.od-low", "p.app.od-low-b", "p.app.pre-high", "p.app.pre-early"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("queue order (-want +got):\n%s", diff)
	}
}

func TestQueuePosition(t *testing.T) {
	tm := newTerm(nil, func(k string) string { return k })
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sk := func(tier api.Tier, minute int, name string) string {
		return SortKey(tier, 0, t0.Add(time.Duration(minute)*time.Minute), name)
	}
	tm.queuePosition("p.app.a", sk(api.TierPreemptible, 1, "p.app.a"))
	tm.queuePosition("p.app.b", sk(api.TierPreemptible, 2, "p.app.b"))
	tm.queuePosition("p.app.r", sk(api.TierReserved, 3, "p.app.r"))
	tests := []struct {
		name, key, sort string
		want            int
	}{
		{"newest Preemptible waits behind the older ones", "p.app.c", sk(api.TierPreemptible, 9, "p.app.c"), 3},
		{"Reserved counts only its own queue", "p.app.r2", sk(api.TierReserved, 9, "p.app.r2"), 2},
		{"an older one goes ahead", "p.app.z", sk(api.TierPreemptible, 0, "p.app.z"), 1},
		{"placed: out of the queue", "p.app.a", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tm.queuePosition(tc.key, tc.sort); got != tc.want {
				t.Errorf("position %d, want %d", got, tc.want)
			}
		})
	}
}

func TestOnlyPreemptibleWorkIsAVictim(t *testing.T) {
	tm := newTerm(nil, func(k string) string { return k })
	for _, tier := range api.Tiers {
		w := tiered(tier, 2)
		w.Metadata.Name = strings.ToLower(string(tier))
		tm.assume(w.Key(), w, &api.PlacementDecision{Shards: []api.Shard{{Cluster: "c", Replicas: 2}}})
	}
	got := tm.victims(func(string) (bool, bool) { return false, true })
	var keys []string
	for _, v := range got["c"] {
		keys = append(keys, v.Key)
	}
	if diff := cmp.Diff([]string{"p.app.preemptible"}, keys); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
}

func TestOptionsFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Options
	}{
		{"defaults", nil, Options{}},
		{"all set", map[string]string{EnvBufferPercent: "15", EnvPreemptibleOnReserved: "true", EnvPreemptionsPerSecond: "2.5", EnvAssumeGrace: "5s"},
			Options{Options: framework.Options{BufferPercent: 15, PreemptibleOnReserved: true}, PreemptionsPerSecond: 2.5, AssumeGrace: 5 * time.Second}},
		{"bad values ignored", map[string]string{EnvBufferPercent: "150", EnvPreemptibleOnReserved: "maybe", EnvPreemptionsPerSecond: "-1", EnvAssumeGrace: "soon"}, Options{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := OptionsFromEnv(func(k string) string { return tc.env[k] }, slog.New(slog.DiscardHandler))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAssumeGrace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		grace    time.Duration
		after    time.Duration // inventory time after the decision
		wantPods int64         // assumed pods on the cluster
	}{
		{"no grace: the next inventory ends it", 0, time.Second, 0},
		{"within the grace: still assumed", 5 * time.Second, time.Second, 2},
		{"past the grace: ended", 5 * time.Second, 6 * time.Second, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tm := newTerm(nil, func(k string) string { return k })
			tm.grace = tc.grace
			w := tiered(api.TierOnDemand, 2)
			tm.assume(w.Key(), w, &api.PlacementDecision{Decided: t0, Shards: []api.Shard{{Cluster: "c", Replicas: 2}}})
			c := ft.Cluster("c", "a", 1, 0)
			c.Updated = t0.Add(tc.after)
			got := tm.overlay([]*api.ClusterInfo{c})[0].Pools[assumedPool].RequestedPods
			if got != tc.wantPods {
				t.Errorf("assumed pods %d, want %d", got, tc.wantPods)
			}
		})
	}
	// Released room ends with the next inventory, grace or not.
	tm := newTerm(nil, func(k string) string { return k })
	tm.grace = time.Hour
	w := tiered(api.TierPreemptible, 2)
	tm.assume(w.Key(), w, &api.PlacementDecision{Decided: t0.Add(-3 * time.Hour), Shards: []api.Shard{{Cluster: "c", Replicas: 2}}})
	c := ft.Cluster("c", "a", 1, 2)
	c.Updated = t0.Add(-time.Second) // counts the victim; its assumption is past its grace
	tm.overlay([]*api.ClusterInfo{c})
	tm.release(w.Key(), t0)
	if got := tm.overlay([]*api.ClusterInfo{c})[0].Pools[assumedPool].RequestedPods; got != -2 {
		t.Fatalf("released pods %d, want -2", got)
	}
	later := *c
	later.Updated = t0.Add(time.Second)
	if got := tm.overlay([]*api.ClusterInfo{&later})[0].Pools[assumedPool].RequestedPods; got != 0 {
		t.Errorf("released pods %d after the next inventory, want 0", got)
	}
}
