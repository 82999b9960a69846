package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/api/apitest"
	"atoll.dev/libs/bus"
)

func put(t *testing.T, b *bus.Bus, bucket, key string, v any) {
	t.Helper()
	kv, err := b.KV(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(v)
	if _, err := kv.Put(context.Background(), key, raw); err != nil {
		t.Fatal(err)
	}
}

// openBus opens an embedded bus for the test, closed at its end, and a
// context ended then.
func openBus(t *testing.T) (context.Context, *bus.Bus, *slog.Logger) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bus.Open(t.Context(), bus.Config{StoreDir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return t.Context(), b, log
}

func app(project, name string, labels map[string]string) *api.Workload {
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp,
		Metadata: api.Metadata{Project: project, Name: name, Labels: labels, Generation: 1},
		Spec:     &api.AppSpec{}}
}

// seedLists writes seven Apps of project p (labels team x and y in
// turn), one of q, and a Running status of p's a3.
func seedLists(t *testing.T, b *bus.Bus) {
	t.Helper()
	for i := range 7 {
		w := app("p", fmt.Sprintf("a%d", i), map[string]string{"team": []string{"x", "y"}[i%2]})
		put(t, b, bus.BucketWorkloads, w.Key(), w)
	}
	put(t, b, bus.BucketWorkloads, api.Key("q", api.KindApp, "other"), app("q", "other", nil))
	put(t, b, bus.BucketStatus, api.Key("p", api.KindApp, "a3"), api.Status{Phase: api.PhaseRunning})
}

func names(items []*Item) (out []string) {
	for _, it := range items {
		out = append(out, it.Name)
	}
	return out
}

// TestCacheFollowsDeletes: a filled cache drops a deleted workload from
// gets, waits and lists.
func TestCacheFollowsDeletes(t *testing.T) {
	ctx, b, log := openBus(t)
	seedLists(t, b)
	c, err := Start(ctx, b, func(w *api.Workload, st *api.Status) ([]byte, error) { return json.Marshal(w.Metadata.Name) }, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	<-c.Ready()
	if !c.WaitFor(ctx, api.Key("p", api.KindApp, "a6"), func(it *Item) bool { return it != nil }) || c.Len() != 8 {
		t.Fatalf("cache holds %d", c.Len())
	}
	kv, _ := b.KV(ctx, bus.BucketWorkloads)
	if err := kv.Delete(ctx, api.Key("p", api.KindApp, "a0")); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if !c.WaitFor(wctx, api.Key("p", api.KindApp, "a0"), func(it *Item) bool { return it == nil }) {
		t.Fatal("deleted workload still cached")
	}
	if items, _, _ := c.List(ctx, "p", Filter{}, "", 100); len(items) != 6 {
		t.Fatalf("after delete: %d items", len(items))
	}
	if _, ok, _ := c.Get(ctx, api.Key("p", api.KindApp, "a0")); ok {
		t.Fatal("deleted workload still found")
	}
}

// TestAnswersFromTheBucketsWhileFilling: a cache whose mirrors cannot
// fill yet (the connection's replay slot is held) answers gets, lists
// (filters and pages), HasProject and a writer's wait from the buckets,
// the same answers as once filled (the same table, checked in both
// states); only Projects, which spans the region, waits for the fill.
func TestAnswersFromTheBucketsWhileFilling(t *testing.T) {
	ctx, b, log := openBus(t)
	seedLists(t, b)
	release, err := b.LoadSlot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, b, func(w *api.Workload, st *api.Status) ([]byte, error) { return json.Marshal(w.Metadata.Name) }, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	tests := []struct {
		name      string
		project   string
		f         Filter
		after     string
		limit     int
		want      string
		wantAfter string
	}{
		{"first page", "p", Filter{}, "", 3, "[a0 a1 a2]", "p.app.a2"},
		{"next page", "p", Filter{}, "p.app.a2", 3, "[a3 a4 a5]", "p.app.a5"},
		{"last page", "p", Filter{}, "p.app.a5", 3, "[a6]", ""},
		{"label", "p", Filter{Labels: map[string]string{"team": "y"}}, "", 10, "[a1 a3 a5]", ""},
		{"phase", "p", Filter{Phase: "running"}, "", 10, "[a3]", ""},
		{"kind", "p", Filter{Kind: api.KindApp}, "p.app.a4", 10, "[a5 a6]", ""},
		{"other kind", "p", Filter{Kind: api.KindJobSet}, "", 10, "[]", ""},
		{"exact page end", "p", Filter{Labels: map[string]string{"team": "x"}}, "", 4, "[a0 a2 a4 a6]", ""},
		{"other project", "q", Filter{}, "", 10, "[other]", ""},
		{"no project", "r", Filter{}, "", 10, "[]", ""},
		{"a pattern is no project", "*", Filter{}, "", 10, "[]", ""},
		{"nor a prefix", "p.app", Filter{}, "", 10, "[]", ""},
	}
	check := func(t *testing.T, state string) {
		t.Helper()
		for _, tc := range tests {
			items, next, err := c.List(ctx, tc.project, tc.f, tc.after, tc.limit)
			if got := fmt.Sprint(names(items)); err != nil || got != tc.want || next != tc.wantAfter {
				t.Errorf("%s, %s: got %s next %q (err %v), want %s next %q", state, tc.name, got, next, err, tc.want, tc.wantAfter)
			}
		}
		if it, ok, err := c.Get(ctx, api.Key("p", api.KindApp, "a3")); err != nil || !ok || it.Phase != api.PhaseRunning || it.Labels["team"] != "y" {
			t.Errorf("%s: get a3 = %+v, %v, %v; want it Running, team y", state, it, ok, err)
		}
		if _, ok, err := c.Get(ctx, api.Key("p", api.KindApp, "none")); ok || err != nil {
			t.Errorf("%s: get of a missing key found %v, err %v", state, ok, err)
		}
		for project, want := range map[string]bool{"p": true, "q": true, "r": false, "*": false, ">": false} {
			if got, err := c.HasProject(ctx, project); got != want || err != nil {
				t.Errorf("%s: HasProject(%s) = %v (err %v), want %v", state, project, got, err, want)
			}
		}
	}

	check(t, "filling")
	if c.Filled() || c.Len() != 0 {
		t.Fatalf("the cache filled (%d items) while the replay slot was held: the answers above were not the buckets'", c.Len())
	}
	// A writer waits for its own write, read from the buckets.
	w := app("p", "new", nil)
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	kv, _ := b.KV(ctx, bus.BucketWorkloads)
	raw, _ := json.Marshal(w)
	time.AfterFunc(3*DirectPoll, func() { _, _ = kv.Put(ctx, w.Key(), raw) })
	if !c.WaitFor(wctx, w.Key(), func(it *Item) bool { return it != nil }) {
		t.Fatal("a write made while filling was never seen")
	}
	pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer pcancel()
	if _, err := c.Projects(pctx); err == nil {
		t.Error("Projects answered before the fill")
	}
	if err := kv.Delete(ctx, w.Key()); err != nil {
		t.Fatal(err)
	}

	release()
	<-c.Ready()
	check(t, "filled")
	if ps, err := c.Projects(ctx); err != nil || fmt.Sprint(ps) != "[p q]" {
		t.Errorf("filled: projects %v, err %v", ps, err)
	}
}

// TestStartRendersEachWorkloadOnce: a cache started over a region's
// workloads and statuses renders each workload once before it is ready,
// not once per mirror's replay and again after both (which made the
// gateway's start grow 2-3 renders per workload).
func TestStartRendersEachWorkloadOnce(t *testing.T) {
	ctx, b, log := openBus(t)
	const n = 500
	for i := range n {
		w := app(fmt.Sprintf("p%d", i%10), fmt.Sprintf("a%04d", i), nil)
		put(t, b, bus.BucketWorkloads, w.Key(), w)
		put(t, b, bus.BucketStatus, w.Key(), api.Status{Phase: api.PhaseRunning})
	}
	var renders atomic.Int64
	c, err := Start(ctx, b, func(w *api.Workload, st *api.Status) ([]byte, error) {
		renders.Add(1)
		return json.Marshal(w.Metadata.Name)
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	<-c.Ready()
	if got := renders.Load(); got != n || c.Len() != n {
		t.Errorf("ready with %d items after %d renders, want %d of each", c.Len(), got, n)
	}
	it, ok, _ := c.Get(ctx, api.Key("p3", api.KindApp, "a0003"))
	if !ok || it.Phase != api.PhaseRunning {
		t.Errorf("item %+v (found %v), want Running", it, ok)
	}
}

// TestCacheHeapIsMostlyUnscanned: a cache of 3,000 workloads, each with a
// realistic App spec and status, adds little heap that the collector must
// scan (runtime/metrics' /gc/scan/heap:bytes, after a collection, before
// and after the cache fills): the mirrors hold the documents' bytes and
// the items their rendered JSON, which the collector does not look into.
// Mirrors of decoded documents added about 4.4 KiB per workload, marked on
// every collection, including the runtime's forced one every two minutes
// in a region at rest.
func TestCacheHeapIsMostlyUnscanned(t *testing.T) {
	ctx, b, log := openBus(t)
	const n = 3000
	for i := range n {
		w := apitest.ServingApp(fmt.Sprintf("p%d", i%30), fmt.Sprintf("a%04d", i))
		put(t, b, bus.BucketWorkloads, w.Key(), w)
		put(t, b, bus.BucketStatus, w.Key(), runningStatus(w))
	}
	before := apitest.ScannableHeap()
	c, err := Start(ctx, b, func(w *api.Workload, st *api.Status) ([]byte, error) {
		return json.Marshal(struct {
			*api.Workload
			Status *api.Status `json:"status,omitempty"`
		}{w, st})
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	<-c.Ready()
	after := apitest.ScannableHeap()
	if c.Len() != n {
		t.Fatalf("cache holds %d, want %d", c.Len(), n)
	}
	per := (int64(after) - int64(before)) / n
	t.Logf("scannable heap %d -> %d bytes: %d per cached workload", before, after, per)
	const limit = 1536
	if per > limit {
		t.Errorf("the cache adds %d bytes of scannable heap per workload, want at most %d", per, limit)
	}
}

// runningStatus is a Running status with counts per zone and cluster,
// conditions and images.
func runningStatus(w *api.Workload) api.Status {
	st := api.Status{Key: w.Key(), Phase: api.PhaseRunning, Generation: w.Metadata.Generation, Desired: 3, Ready: 3, Running: 3,
		Zones: map[string]api.ZoneStatus{}, Clusters: map[string]api.ZoneStatus{},
		Images: []string{"registry.example/server:1.4.2", "registry.example/metrics:1.4.2"}}
	for _, z := range []string{"a", "b", "c"} {
		st.Zones[z] = api.ZoneStatus{}
		st.Clusters["zone-"+z] = api.ZoneStatus{}
	}
	for _, c := range []string{"Scheduled", "Propagated", "Available"} {
		st.Conditions = append(st.Conditions, api.Condition{Type: c, Status: true, Reason: c, Message: c + " on every cluster"})
	}
	return st
}
