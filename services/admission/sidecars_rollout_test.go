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

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/admission"
	"atoll.dev/services/quota"
)

// fakeStatus stands in for the aggregator and the propagator: every tick
// it writes each workload's status of its current generation, one pod in
// each of zones a and b running the sidecars the rollout's progress gives
// that zone (api.SidecarProgress.HeldBack), ready unless sick says those
// sidecars never become ready.
func fakeStatus(ctx context.Context, t *testing.T, b *bus.Bus, sick func(sidecars []api.Container) bool) {
	t.Helper()
	wkv, err := b.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	skv, err := b.KV(ctx, bus.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := b.KV(ctx, bus.BucketSidecars)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			var p *api.SidecarProgress
			if e, err := kv.Get(ctx, api.SidecarProgressKey); err == nil {
				p = &api.SidecarProgress{}
				_ = json.Unmarshal(e.Value(), p)
			}
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
				st := api.Status{Key: k, Generation: w.Metadata.Generation, Phase: api.PhaseRunning, Desired: 2, Zones: map[string]api.ZoneStatus{}}
				for _, z := range []string{"a", "b"} {
					sc, held := p.HeldBack(w, z)
					if !held {
						sc = w.Spec.PodTemplate().Sidecars
					}
					zs := api.ZoneStatus{Desired: 1, Running: 1}
					if !sick(sc) {
						zs.Ready = 1
						zs.Sidecars = map[string]int32{}
						for _, c := range sc {
							zs.Sidecars[api.SidecarImageKey(c.Name, c.Image)] = 1
						}
					}
					st.Zones[z] = zs
					st.Ready += zs.Ready
					st.Running++
				}
				doc, _ := json.Marshal(st)
				_, _ = skv.Put(ctx, k, doc)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// TestSidecarRollout moves running workloads to a new version of the
// managed sidecars zone by zone: every stored workload moves at once,
// zone b opens only once zone a is healthy and baked. A version whose
// sidecars never become ready fails the health gate in zone a, which
// pauses the rollout and (onFailure Rollback) returns every workload to
// the version it ran; zone b is never opened to it. A workload written
// during a rollout gets the current version in every zone.
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
	const bake = 60 * time.Millisecond
	admission.SetSidecarTiming(a, 20*time.Millisecond, 400*time.Millisecond, bake)
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
	submit := func(name string) *api.Workload {
		t.Helper()
		doc := fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":%q},"spec":{"replicas":2,"template":{"containers":[{"name":"a","image":"nginx"}]}}}`, name)
		reply, eb := call(t, b, bus.AdmissionSubmit, []byte(doc), nil)
		if eb != nil {
			t.Fatal(eb)
		}
		w, err := api.Decode(reply.Data)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}

	setSidecars(t, b, version(1, "log:1", ""))
	const n = 5
	for i := range n {
		waitFor("a submit on version 1", func() bool {
			if submit(fmt.Sprintf("app%d", i)).Metadata.SidecarVersion != 1 {
				_, _ = call(t, b, bus.AdmissionDelete, []byte(fmt.Sprintf(`{"project":"p","kind":"App","name":"app%d"}`, i)), nil)
				return false
			}
			return true
		})
	}
	fakeStatus(ctx, t, b, func(sc []api.Container) bool { return len(sc) == 1 && sc[0].Image == "log:3" })
	waitFor("version 1 complete", func() bool { p := progress(); return p.Version == 1 && p.Phase == api.SidecarRolloutComplete })
	skv, err := b.KV(ctx, bus.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	waitFor("every status", func() bool {
		keys, _ := skv.Keys(ctx)
		return len(keys) == n
	})
	// Sample zone b while zone a is not done: it must be pending.
	var (
		mu         sync.Mutex
		early      []string
		mostMoving int // the most Apps listed moving at once (maxUnavailable 2)
	)
	go func() {
		for ctx.Err() == nil {
			p := progress()
			mu.Lock()
			mostMoving = max(mostMoving, len(p.Moving))
			mu.Unlock()
			if za, zb := p.Zone("a"), p.Zone("b"); za != nil && zb != nil && za.Phase != api.SidecarZoneDone && zb.Phase != api.SidecarZonePending {
				mu.Lock()
				early = append(early, fmt.Sprintf("v%d: a %s, b %s", p.Version, za.Phase, zb.Phase))
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// Version 2, image only: every workload moves, zone a then zone b.
	setSidecars(t, b, version(2, "log:2", api.SidecarOnFailureRollback))
	waitFor("version 2 moving zone a", func() bool {
		p := progress()
		return p.Version == 2 && len(p.Zones) == 2
	})
	late := submit("late")
	if late.Metadata.SidecarVersion != 2 || late.Metadata.SidecarPrevious != nil {
		t.Errorf("a workload submitted during the rollout: version %d, previous %+v; want 2 in every zone", late.Metadata.SidecarVersion, late.Metadata.SidecarPrevious)
	}
	waitFor("version 2 complete", func() bool {
		p := progress()
		return p.Version == 2 && p.Phase == api.SidecarRolloutComplete
	})
	p := progress()
	if p.Done != n {
		t.Errorf("done %d, want %d", p.Done, n)
	}
	za, zb := p.Zone("a"), p.Zone("b")
	if za == nil || zb == nil || za.Phase != api.SidecarZoneDone || zb.Phase != api.SidecarZoneDone {
		t.Fatalf("zones %+v, want a and b done", p.Zones)
	}
	if za.Finished.Sub(za.ReadySince) < bake || zb.Started.Before(za.Finished) {
		t.Errorf("zone a ready %s, baked %s; zone b started %s: want b after a baked", za.ReadySince, za.Finished, zb.Started)
	}
	before := stored()
	for k, w := range before {
		if w.Metadata.SidecarVersion != 2 || w.Spec.PodTemplate().Sidecars[0].Image != "log:2" {
			t.Errorf("%s: version %d, sidecars %+v", k, w.Metadata.SidecarVersion, w.Spec.PodTemplate().Sidecars)
		}
		if k == late.Key() {
			continue
		}
		if w.Metadata.Generation != 2 || !strings.Contains(w.Metadata.EventMessage, "from version 1 to 2") ||
			w.Metadata.SidecarPrevious == nil || w.Metadata.SidecarPrevious.Version != 1 {
			t.Errorf("%s: generation %d, event %q, previous %+v: want one move from 1", k, w.Metadata.Generation, w.Metadata.EventMessage, w.Metadata.SidecarPrevious)
		}
	}

	// Version 3 never becomes ready: zone a fails the gate, every
	// workload goes back to version 2, the rollout pauses; zone b never
	// opens.
	setSidecars(t, b, version(3, "log:3", api.SidecarOnFailureRollback))
	waitFor("version 3 paused and rolled back", func() bool {
		p := progress()
		return p.Version == 3 && p.Phase == api.SidecarRolloutPaused && p.RolledBack == n+1
	})
	time.Sleep(200 * time.Millisecond) // ten ticks: nothing more moves
	p = progress()
	if za, zb := p.Zone("a"), p.Zone("b"); za == nil || zb == nil || za.Phase != api.SidecarZoneRolledBack || zb.Phase != api.SidecarZonePending || !zb.Started.IsZero() {
		t.Errorf("zones %+v, want a rolled back and b never started", p.Zones)
	}
	for k, w := range stored() {
		if w.Metadata.SidecarVersion != 2 || w.Spec.PodTemplate().Sidecars[0].Image != "log:2" || w.Metadata.SidecarPrevious != nil {
			t.Errorf("%s: version %d, previous %+v after the rollback, want 2 everywhere", k, w.Metadata.SidecarVersion, w.Metadata.SidecarPrevious)
		}
		if w.Metadata.Generation != before[k].Metadata.Generation+2 || !strings.Contains(w.Metadata.EventMessage, "rolled back from version 3 to 2") {
			t.Errorf("%s: generation %d, event %q: want moved and rolled back", k, w.Metadata.Generation, w.Metadata.EventMessage)
		}
	}
	mu.Lock()
	if len(early) > 0 {
		t.Errorf("zone b opened before zone a was done: %v", early)
	}
	if mostMoving < 1 || mostMoving > 2 {
		t.Errorf("at most %d Apps listed moving at once, want 1 or 2 (maxUnavailable 2)", mostMoving)
	}
	mu.Unlock()

	// An abort of version 3 stops it for good; a resume does not restart it.
	ctl, _ := json.Marshal(api.SidecarControl{Aborted: 3, Reason: "bad image", ResumeSeq: 1})
	if _, err := kv.Put(ctx, api.SidecarControlKey, ctl); err != nil {
		t.Fatal(err)
	}
	waitFor("version 3 aborted", func() bool { return progress().Phase == api.SidecarRolloutAborted })
}

// TestSidecarStepsOfAnInterruptedTickArePublishedOnce: a rollout replica
// that wrote its progress and stopped before publishing that step's
// events left them in the progress (Steps); the next replica's first look
// publishes them, and later looks publish nothing more.
func TestSidecarStepsOfAnInterruptedTickArePublishedOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	v := api.SidecarVersion{Version: 1, Created: time.Now().UTC(), SidecarSpec: api.SidecarSpec{
		Sidecars: []api.ManagedSidecar{{Container: api.Container{Name: "log", Image: "log:1"}}}}}
	setSidecars(t, b, v)
	kv, err := b.KV(ctx, bus.BucketSidecars)
	if err != nil {
		t.Fatal(err)
	}
	// What the interrupted replica wrote: zone a baked and the rollout
	// done, neither event published.
	doc, _ := json.Marshal(api.SidecarProgress{Version: 1, Phase: api.SidecarRolloutComplete,
		Zones: []api.SidecarZone{{Name: "a", Phase: api.SidecarZoneDone}},
		Steps: []api.SidecarStep{
			{Event: api.EventSidecarZoneBaked, Zone: "a", Message: "zone a baked"},
			{Event: api.EventSidecarRolloutDone, Message: "version 1 runs in every zone"},
		}})
	if _, err := kv.Put(ctx, api.SidecarProgressKey, doc); err != nil {
		t.Fatal(err)
	}
	evs, err := b.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventRoot + "." + api.SidecarEventProject + ".>"}})
	if err != nil {
		t.Fatal(err)
	}

	q := quota.New(b, slog.Default(), quota.Ample())
	a := admission.New(b, slog.Default(), nil)
	admission.SetSidecarTiming(a, 20*time.Millisecond, time.Second, 0)
	for _, s := range []interface {
		Start(context.Context) error
		Stop() error
	}{q, a} {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop() })
	}
	var got []string
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		got = append(got, eventsOf(t, evs)...)
	}
	time.Sleep(500 * time.Millisecond) // 25 looks: nothing more
	got = append(got, eventsOf(t, evs)...)
	want := []string{api.EventSidecarZoneBaked, api.EventSidecarRolloutDone}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("events %v, want %v once each", got, want)
	}
}
