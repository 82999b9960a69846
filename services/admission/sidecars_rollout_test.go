package admission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/admission"
	"atoll.dev/services/quota"
)

// fakeStatus stands in for the aggregator: every tick it writes each
// workload's status of its current generation, all pods ready unless
// sick says its sidecars never become ready.
func fakeStatus(ctx context.Context, t *testing.T, b *bus.Bus, sick func(w *api.Workload) bool) {
	t.Helper()
	wkv, err := b.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	skv, err := b.KV(ctx, bus.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			keys, _ := wkv.Keys(ctx)
			for _, k := range keys {
				e, err := wkv.Get(ctx, k)
				if err != nil {
					continue
				}
				w, err := api.Decode(e.Value())
				if err != nil {
					continue
				}
				st := api.Status{Key: k, Generation: w.Metadata.Generation, Phase: api.PhaseRunning, Desired: 2, Ready: 2, Running: 2}
				if sick(w) {
					st.Ready = 1
				}
				doc, _ := json.Marshal(st)
				_, _ = skv.Put(ctx, k, doc)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// TestSidecarRollout moves running workloads to a new version of the
// managed sidecars, at most maxUnavailable at a time, each held until it
// is healthy and baked; a version whose sidecars never become ready
// fails the health gate, which pauses the rollout and (onFailure
// Rollback) returns the workloads it moved to the version they ran,
// leaving the others untouched.
func TestSidecarRollout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	q := quota.New(b, slog.Default(), quota.Ample())
	a := admission.New(b, slog.Default(), nil)
	admission.SetSidecarTiming(a, 20*time.Millisecond, 400*time.Millisecond, 60*time.Millisecond)
	for _, s := range []interface {
		Start(context.Context) error
		Stop() error
	}{q, a} {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop() })
	}
	kv, err := b.KV(ctx, bus.BucketSidecars)
	if err != nil {
		t.Fatal(err)
	}
	version := func(n int64, image, onFailure string) api.SidecarVersion {
		return api.SidecarVersion{Version: n, Created: time.Now().UTC(), SidecarSpec: api.SidecarSpec{
			Sidecars: []api.ManagedSidecar{{Container: api.Container{Name: "log", Image: image}}},
			Rollout:  api.SidecarRollout{MaxUnavailable: 2, BakeSeconds: 1, OnFailure: onFailure}}}
	}
	progress := func() api.SidecarProgress {
		var p api.SidecarProgress
		if e, err := kv.Get(ctx, api.SidecarProgressKey); err == nil {
			_ = json.Unmarshal(e.Value(), &p)
		}
		return p
	}
	stored := func() map[string]*api.Workload {
		out := map[string]*api.Workload{}
		wkv, _ := b.KV(ctx, bus.BucketWorkloads)
		keys, _ := wkv.Keys(ctx)
		for _, k := range keys {
			if e, err := wkv.Get(ctx, k); err == nil {
				w, _ := api.Decode(e.Value())
				out[k] = w
			}
		}
		return out
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; progress %+v", what, progress())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	setSidecars(t, b, version(1, "log:1", ""))
	const n = 5
	for i := range n {
		doc := fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"app%d"},"spec":{"replicas":2,"template":{"containers":[{"name":"a","image":"nginx"}]}}}`, i)
		waitFor("a submit on version 1", func() bool {
			reply, eb := call(t, b, bus.AdmissionSubmit, []byte(doc), nil)
			if eb != nil {
				t.Fatal(eb)
			}
			w, _ := api.Decode(reply.Data)
			if w.Metadata.SidecarVersion != 1 {
				_, _ = call(t, b, bus.AdmissionDelete, []byte(fmt.Sprintf(`{"project":"p","kind":"App","name":"app%d"}`, i)), nil)
				return false
			}
			return true
		})
	}
	fakeStatus(ctx, t, b, func(w *api.Workload) bool {
		sc := w.Spec.PodTemplate().Sidecars
		return len(sc) == 1 && sc[0].Image == "log:3"
	})
	// Sample how many workloads are being moved at once.
	var (
		mu       sync.Mutex
		maxMoves int
	)
	go func() {
		for ctx.Err() == nil {
			p := progress()
			mu.Lock()
			maxMoves = max(maxMoves, len(p.Moving))
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// Version 2, image only: every workload moves, two at a time.
	setSidecars(t, b, version(2, "log:2", api.SidecarOnFailureRollback))
	waitFor("version 2 complete", func() bool {
		p := progress()
		return p.Version == 2 && p.Phase == api.SidecarRolloutComplete
	})
	if p := progress(); p.Done != n {
		t.Errorf("done %d, want %d", p.Done, n)
	}
	before := stored()
	for k, w := range before {
		if w.Metadata.SidecarVersion != 2 || w.Spec.PodTemplate().Sidecars[0].Image != "log:2" {
			t.Errorf("%s: version %d, sidecars %+v", k, w.Metadata.SidecarVersion, w.Spec.PodTemplate().Sidecars)
		}
		if w.Metadata.Generation != 2 || !strings.Contains(w.Metadata.EventMessage, "from version 1 to 2") {
			t.Errorf("%s: generation %d, event %q: want one move", k, w.Metadata.Generation, w.Metadata.EventMessage)
		}
	}
	mu.Lock()
	if maxMoves > 2 || maxMoves == 0 {
		t.Errorf("at most %d workloads were moved at once, want 1 or 2 (maxUnavailable)", maxMoves)
	}
	mu.Unlock()

	// Version 3 never becomes ready: the first two moved fail the gate,
	// go back to version 2, and the rollout pauses; the rest never move.
	setSidecars(t, b, version(3, "log:3", api.SidecarOnFailureRollback))
	waitFor("version 3 paused and rolled back", func() bool {
		p := progress()
		return p.Version == 3 && p.Phase == api.SidecarRolloutPaused && p.RolledBack == 2 && len(p.Moving) == 0
	})
	time.Sleep(200 * time.Millisecond) // ten ticks: nothing more moves
	moved := 0
	for k, w := range stored() {
		if w.Metadata.SidecarVersion != 2 || w.Spec.PodTemplate().Sidecars[0].Image != "log:2" {
			t.Errorf("%s: version %d after the rollback, want 2", k, w.Metadata.SidecarVersion)
		}
		if w.Metadata.Generation != before[k].Metadata.Generation {
			moved++
			if w.Metadata.Generation != before[k].Metadata.Generation+2 || !strings.Contains(w.Metadata.EventMessage, "rolled back from version 3 to 2") {
				t.Errorf("%s: generation %d, event %q: want moved and rolled back", k, w.Metadata.Generation, w.Metadata.EventMessage)
			}
		}
	}
	if moved != 2 {
		t.Errorf("%d workloads were touched by version 3, want 2 (maxUnavailable)", moved)
	}

	// An abort of version 3 stops it for good; a resume does not restart it.
	ctl, _ := json.Marshal(api.SidecarControl{Aborted: 3, Reason: "bad image", ResumeSeq: 1})
	if _, err := kv.Put(ctx, api.SidecarControlKey, ctl); err != nil {
		t.Fatal(err)
	}
	waitFor("version 3 aborted", func() bool { return progress().Phase == api.SidecarRolloutAborted })
}
