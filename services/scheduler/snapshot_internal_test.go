package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/api/apitest"
	"atoll.dev/libs/bus"
)

// TestWorkloadCacheDecodesOncePerChangeAndStaysBounded reads three times
// decodedKeep workloads through the scheduler's cache: a second read of a
// key returns what the first decoded, a new revision is decoded again,
// and the heap the collector scans stops growing once the cache is full
// (holding every workload decoded, it grew by about 2.3 KB a workload).
func TestWorkloadCacheDecodesOncePerChangeAndStaysBounded(t *testing.T) {
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	n := 3 * decodedKeep
	keys := make([]string, n)
	for i := range n {
		w := apitest.ServingApp(fmt.Sprintf("p%d", i%30), fmt.Sprintf("a%05d", i))
		keys[i] = w.Key()
		put(t, kv, w)
	}
	m, err := b.Mirror(ctx, bus.BucketWorkloads, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	<-m.Ready()
	s := &Service{workloadM: m, decoded: newWorkloadCache()}

	read := func(key string) *api.Workload {
		t.Helper()
		w, ok, err := s.workload(key)
		if !ok || err != nil {
			t.Fatalf("workload %s: ok %v, err %v", key, ok, err)
		}
		return w
	}
	// Decoded once per revision.
	first := read(keys[0])
	if again := read(keys[0]); again != first {
		t.Error("a second read of an unchanged workload decoded it again")
	}
	changed := apitest.ServingApp("p0", "a00000")
	changed.Metadata.Generation = 2
	put(t, kv, changed)
	waitFor(t, func() bool { return read(keys[0]).Metadata.Generation == 2 })

	// Bounded: the first decodedKeep reads fill the cache; the next
	// 2 × decodedKeep add nothing the collector scans.
	h0 := apitest.ScannableHeap()
	for _, k := range keys[:decodedKeep] {
		read(k)
	}
	h1 := apitest.ScannableHeap()
	for _, k := range keys[decodedKeep:] {
		read(k)
	}
	h2 := apitest.ScannableHeap()
	fill, more := int64(h1)-int64(h0), int64(h2)-int64(h1)
	t.Logf("scannable heap: +%d bytes for the first %d workloads read, %+d for the next %d; %d held",
		fill, decodedKeep, more, n-decodedKeep, s.decoded.Len())
	if fill < 1000*decodedKeep {
		t.Fatalf("reading %d workloads added %d bytes of scannable heap: is anything decoded?", decodedKeep, fill)
	}
	if more > fill/4 {
		t.Errorf("reading %d more workloads added %d bytes of scannable heap (the first %d: %d); want the cache bounded",
			n-decodedKeep, more, decodedKeep, fill)
	}
	if s.decoded.Len() > decodedKeep {
		t.Errorf("cache holds %d, want at most %d", s.decoded.Len(), decodedKeep)
	}
	// A key that fell out is decoded again, as it is now.
	if w := read(keys[0]); w.Metadata.Generation != 2 || w == first {
		t.Errorf("evicted key read back as generation %d", w.Metadata.Generation)
	}
}

func put(t *testing.T, kv interface {
	Put(context.Context, string, []byte) (uint64, error)
}, w *api.Workload) {
	t.Helper()
	raw, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), w.Key(), raw); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
	}
}
