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

func TestListFiltersAndPages(t *testing.T) {
	ctx, b, log := openBus(t)
	for i := range 7 {
		w := app("p", fmt.Sprintf("a%d", i), map[string]string{"team": []string{"x", "y"}[i%2]})
		put(t, b, bus.BucketWorkloads, w.Key(), w)
	}
	put(t, b, bus.BucketWorkloads, api.Key("q", api.KindApp, "other"), app("q", "other", nil))
	put(t, b, bus.BucketStatus, api.Key("p", api.KindApp, "a3"), api.Status{Phase: api.PhaseRunning})
	renders := 0
	c, err := Start(ctx, b, func(w *api.Workload, st *api.Status) ([]byte, error) { renders++; return json.Marshal(w.Metadata.Name) }, log)
	if err != nil {
		t.Fatal(err)
	}
	<-c.Ready()
	if !c.WaitFor(ctx, api.Key("p", api.KindApp, "a6"), func(it *Item) bool { return it != nil }) || c.Len() != 8 {
		t.Fatalf("cache holds %d", c.Len())
	}
	names := func(items []*Item) (out []string) {
		for _, it := range items {
			out = append(out, it.Name)
		}
		return out
	}
	tests := []struct {
		name      string
		f         Filter
		after     string
		limit     int
		want      string
		wantAfter string
	}{
		{"first page", Filter{}, "", 3, "[a0 a1 a2]", "p.app.a2"},
		{"next page", Filter{}, "p.app.a2", 3, "[a3 a4 a5]", "p.app.a5"},
		{"last page", Filter{}, "p.app.a5", 3, "[a6]", ""},
		{"label", Filter{Labels: map[string]string{"team": "y"}}, "", 10, "[a1 a3 a5]", ""},
		{"phase", Filter{Phase: "running"}, "", 10, "[a3]", ""},
		{"kind", Filter{Kind: api.KindJobSet}, "", 10, "[]", ""},
		{"exact page end", Filter{Labels: map[string]string{"team": "x"}}, "", 4, "[a0 a2 a4 a6]", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			items, next := c.List("p", tc.f, tc.after, tc.limit)
			if got := fmt.Sprint(names(items)); got != tc.want || next != tc.wantAfter {
				t.Fatalf("got %s next %q, want %s next %q", got, next, tc.want, tc.wantAfter)
			}
		})
	}
	// A status change re-renders the item; a delete removes it.
	kv, _ := b.KV(ctx, bus.BucketWorkloads)
	if err := kv.Delete(ctx, api.Key("p", api.KindApp, "a0")); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if !c.WaitFor(wctx, api.Key("p", api.KindApp, "a0"), func(it *Item) bool { return it == nil }) {
		t.Fatal("deleted workload still cached")
	}
	if items, _ := c.List("p", Filter{}, "", 100); len(items) != 6 {
		t.Fatalf("after delete: %d items", len(items))
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
	it, ok := c.Get(api.Key("p3", api.KindApp, "a0003"))
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
