package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/aggregator/rollout"
)

// Zone-by-zone rollouts of Apps run here, under their own lease
// (LeaseRollout), because the aggregator already sees every shard's
// Deployment through the observations bucket: the rollout controller reads
// workloads, placements and observations, steps each App's rollout with
// the pure machine of package rollout, writes the result to bucket
// rollouts (whose only writer it is, by compare-and-set) and then ensures
// the events of that write, under the write's revision, so that a crash
// between the two is repaired by the next reconcile. The propagator
// renders each zone from that document (services/propagator/rollout.go).

// LeaseRollout is the lease of the replica that runs the Apps' rollouts.
const LeaseRollout = "aggregator-rollout"

// DefaultRolloutTick is how often an App whose rollout is progressing is
// looked at again without a change, for bake times and deadlines, unless
// WithRolloutTick says otherwise.
const DefaultRolloutTick = 2 * time.Second

// WithRolloutTick sets how often an App whose rollout is progressing is
// looked at again without a change (DefaultRolloutTick): shorter in tests
// that step rollouts.
func WithRolloutTick(d time.Duration) Option {
	return func(s *Service) { s.rolloutTick = d }
}

// rolloutTerm is one term of LeaseRollout.
type rolloutTerm struct {
	s   *Service
	log *slog.Logger
	q   *bus.Queue
	kv  jetstream.KeyValue

	workloads, placements, observations *bus.Mirror

	mu      sync.Mutex
	ensured map[string]uint64 // mu must be held: the rollout revision whose events were ensured, per key
}

// leadRollouts runs one term of LeaseRollout.
func (s *Service) leadRollouts(ctx context.Context) {
	t := &rolloutTerm{s: s, log: s.log.With("lease", LeaseRollout), q: bus.NewQueue(bus.Instrumented(s.metrics, "rollout")),
		ensured: map[string]uint64{}}
	// Changes from here on are queued; those before are in the mirrors,
	// whose keys the term queues once they are loaded.
	s.rolloutLive.Store(t)
	defer func() {
		s.rolloutLive.CompareAndSwap(t, nil)
		t.q.Close() // also when the term ends before the queue runs
	}()
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		err := t.open(ctx)
		if err == nil {
			break
		}
		t.log.Warn("open rollout buckets", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(bus.Jitter(delay, 0.2)):
		}
	}
	for _, m := range []*bus.Mirror{t.workloads, t.placements, t.observations} {
		select {
		case <-ctx.Done():
			return
		case <-m.Ready():
		}
	}
	for _, k := range t.workloads.Keys() {
		t.q.Add(k)
	}
	if keys, err := t.kv.ListKeys(ctx); err == nil {
		for k := range keys.Keys() {
			t.q.Add(k) // rollouts of Apps deleted while no term ran
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { t.workloads.Resync(ctx, Resync, t.q, nil) })
	t.q.Run(ctx, 2, t.log, t.reconcile)
	wg.Wait()
}

// add queues key (a mirror's callback, Service.openFoldMirrors).
func (t *rolloutTerm) add(key string) { t.q.Add(key) }

// open opens the rollouts bucket and the replica's mirrors, shared with
// the status terms (Service.foldMirrors).
func (t *rolloutTerm) open(ctx context.Context) error {
	if t.kv == nil {
		kv, err := t.s.bus.KV(ctx, bus.BucketRollouts)
		if err != nil {
			return err
		}
		t.kv = kv
	}
	m, err := t.s.openFoldMirrors()
	if err != nil {
		return err
	}
	t.workloads, t.placements, t.observations = m.workloads, m.placements, m.observations
	return nil
}

// reconcile steps key's rollout, when key is an App's.
func (t *rolloutTerm) reconcile(ctx context.Context, key string) error {
	if _, kind, _, err := api.ParseKey(key); err != nil || kind != api.KindApp {
		return nil
	}
	var prev *api.Rollout
	var rev uint64
	switch e, err := t.kv.Get(ctx, key); {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return fmt.Errorf("read rollout %s: %w", key, err)
	default:
		prev, rev = &api.Rollout{}, e.Revision()
		if err := json.Unmarshal(e.Value(), prev); err != nil {
			t.log.Warn("undecodable rollout; starting over", "key", key, "err", err)
			prev = nil
		}
	}
	we, ok := t.workloads.Get(key)
	if !ok {
		t.mu.Lock()
		delete(t.ensured, key)
		t.mu.Unlock()
		if rev != 0 {
			if err := t.kv.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				return fmt.Errorf("delete rollout %s: %w", key, err)
			}
		}
		return nil
	}
	w, err := api.Decode(we.Value)
	if err != nil {
		return nil
	}
	spec, ok := w.Spec.(*api.AppSpec)
	if !ok {
		return nil
	}
	in, ok := t.input(w, spec)
	if !ok {
		return nil // no placement for this generation yet: its write requeues the key
	}
	next, changed := rollout.Step(prev, in)
	if changed {
		body, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if rev, err = bus.CompareAndSet(ctx, t.kv, key, body, rev); err != nil {
			return fmt.Errorf("write rollout %s: %w", key, err)
		}
		// A step that starts, finishes, pauses or rolls back a zone is worth
		// a line; the first record of every new App is not.
		level := slog.LevelDebug
		if len(next.Events) > 0 {
			level = slog.LevelInfo
		}
		t.log.Log(ctx, level, "rollout stepped", "key", key, "phase", next.Phase, "seq", next.Seq, "events", len(next.Events))
	}
	if err := t.ensureEvents(ctx, w, next, rev); err != nil {
		return err
	}
	if next.Phase == api.RolloutProgressing {
		t.q.AddAfter(key, t.s.rolloutTick)
	}
	return nil
}

// input gathers what the machine reads for w: false when the placement
// is not for w's generation.
func (t *rolloutTerm) input(w *api.Workload, spec *api.AppSpec) (rollout.Input, bool) {
	key := w.Key()
	pe, ok := t.placements.Get(key)
	if !ok {
		return rollout.Input{}, false
	}
	var p api.PlacementDecision
	if json.Unmarshal(pe.Value, &p) != nil || p.Generation != w.Metadata.Generation {
		return rollout.Input{}, false
	}
	target := api.TemplateHash(&spec.Template)
	zones := map[string]rollout.ZoneObservation{}
	for _, sh := range p.Shards {
		desired := sh.Replicas
		if w.Control.Paused {
			desired = 0
		}
		z, seen := zones[sh.Zone]
		if !seen {
			z.Current = true
		}
		z.Desired += desired
		var o appPart
		if e, ok := t.observations.Get(observationKey(sh.Cluster, key)); ok {
			_ = json.Unmarshal(e.Value, &o)
		}
		d := o.Deployment
		if d == nil || d.Template != target || !d.Observed || d.Generation != w.Metadata.Generation {
			z.Current = false
		} else {
			// Available counts old pods too while they remain.
			z.UpdatedAvailable += min(d.Updated, max(0, d.Available-(d.Replicas-d.Updated)))
			if d.Failing > 0 && d.Available-(d.Replicas-d.Updated) < desired {
				z.CrashLooping = true
			}
		}
		zones[sh.Zone] = z
	}
	return rollout.Input{Key: key, Now: time.Now(), Template: &spec.Template, Strategy: spec.Rollout,
		Zones: zones, Control: w.Control.Rollout}, true
}

// ensureEvents publishes the events of r's last change (written at rev)
// unless the stream holds them: once per term and key unless it changed.
func (t *rolloutTerm) ensureEvents(ctx context.Context, w *api.Workload, r *api.Rollout, rev uint64) error {
	key := w.Key()
	t.mu.Lock()
	done := t.ensured[key] == rev
	t.mu.Unlock()
	if done || rev == 0 {
		return nil
	}
	for _, ev := range r.Events {
		if err := t.s.pub.Ensure(ctx, w, ev.Event, ev.Message, rev); err != nil {
			return fmt.Errorf("rollout event %s of %s: %w", ev.Event, key, err)
		}
	}
	t.mu.Lock()
	t.ensured[key] = rev
	t.mu.Unlock()
	return nil
}
