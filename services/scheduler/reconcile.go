package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// The reconcile of one workload runs in phases, one method each below,
// each logged at debug level with the workload's key and the phase's
// name. Where a kind does something of its own, the phase calls the
// kind's hooks (kindHooks, one file per kind):
//
//  1. read: the workload, decoded once and handed to every later phase,
//     and its previous placement;
//  2. gate: the kind's own rules first (a gang's timers), then a previous
//     placement that still stands is only announced again, and one whose
//     run has finished is left alone;
//  3. decide: the pure decision on the term's snapshot (DecideWith), with
//     preemption for Reserved and OnDemand work short of room;
//  4. after-decide: the kind refines the decision from the previous one;
//     a decision equal to the previous is only announced again;
//  5. write: a compare-and-set of the placement (a workload that is gone
//     has its placement removed instead);
//  6. announce: the kind's events, then the placement's.

// recon is one workload's way through the phases of a reconcile: what the
// read phase found, handed on to every later phase.
type recon struct {
	// key is the workload's key (project.kind.name).
	key string
	// w is the workload, decoded; nil when it is gone.
	w *api.Workload
	// kind is the hooks of w's kind.
	kind kindHooks
	// prev is the placement decided before, nil when there is none; prevRev
	// is its revision, 0 when there is none.
	prev    *api.PlacementDecision
	prevRev uint64
}

// phase logs that key enters the named phase.
func (s *Service) phase(key, name string) {
	s.log.Debug("reconcile phase", "key", key, "phase", name)
}

// reconcile decides the placement of one workload.
func (s *Service) reconcile(ctx context.Context, t *term, key string) error {
	// Taken: decisions of worse-ranked keys wait a moment for this one
	// to get to its own (decideLock); one that needs none leaves.
	turn := t.decide.Take(s.sortKey(key))
	defer turn.Leave()
	r, err := s.read(ctx, key)
	if err != nil || r == nil {
		return err
	}
	if r.w == nil {
		turn.Leave()
		return s.remove(ctx, t, key)
	}
	if done, err := s.gate(ctx, t, r, turn); done {
		return err
	}
	// Decide and assume under the term's lock, so that parallel workers
	// never see the same free capacity; the write happens outside it, and
	// a write that fails gives back what was assumed.
	turn.Lock()
	d, ok, err := s.decide(ctx, t, r)
	if !ok {
		t.decide.Unlock()
		return err
	}
	d, changed := s.afterDecide(t, r, d)
	if !changed {
		t.decide.Unlock()
		return s.announce(ctx, t, r, r.prev, r.prevRev, false)
	}
	undo := t.assume(key, r.w, &d)
	t.decide.Unlock()
	rev, ok, err := s.write(ctx, t, r, &d, undo)
	if !ok {
		return err
	}
	return s.announce(ctx, t, r, &d, rev, true)
}

// read finds the workload (decoded once, for every later phase) and its
// previous placement, read from the bucket rather than the mirror, which
// may lag, since the write compares and sets its revision. A workload
// that is gone gives a recon without one; nil means nothing to place: an
// undecodable document (logged) or a kind the scheduler does not place.
func (s *Service) read(ctx context.Context, key string) (*recon, error) {
	s.phase(key, "read")
	w, ok, err := s.workload(key)
	if !ok {
		return &recon{key: key}, nil
	}
	if err != nil {
		s.log.Error("undecodable workload", "key", key, "err", err)
		return nil, nil
	}
	if !api.Placed(w.Kind) {
		return nil, nil // a policy kind (a Scaler) is placed nowhere
	}
	r := &recon{key: key, w: w, kind: s.kinds.of(w.Kind)}
	pe, err := s.placements.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read placement %s: %w", key, err)
	}
	r.prev, r.prevRev = &api.PlacementDecision{}, pe.Revision()
	if err := json.Unmarshal(pe.Value(), r.prev); err != nil {
		r.prev = nil
	}
	return r, nil
}

// gate says whether the workload's reconcile is over before a decision:
// the kind's own rules first; then a previous placement that still stands
// is announced (again), and one whose run has finished stays as it is.
func (s *Service) gate(ctx context.Context, t *term, r *recon, turn *ticket) (done bool, err error) {
	s.phase(r.key, "gate")
	if done, err := r.kind.gate(ctx, s, t, r); done {
		return true, err
	}
	if r.prev == nil {
		return false, nil
	}
	if s.stillGood(r.prev, r.w, s.snapshot(t)) {
		turn.Leave() // no decision: worse-ranked ones need not wait for the announce
		return true, s.announce(ctx, t, r, r.prev, r.prevRev, false)
	}
	return s.finished(ctx, r), nil
}

// decide makes the decision for r; t.decide must be held. ok is false
// when there is nothing to write: an error, or preemption needed but
// held back by its rate bound (the key comes back after the wait).
func (s *Service) decide(ctx context.Context, t *term, r *recon) (d api.PlacementDecision, ok bool, err error) {
	s.phase(r.key, "decide")
	d, wait, err := s.decideOrPreempt(ctx, t, r.w, r.prev)
	if err != nil {
		return d, false, err
	}
	if wait > 0 {
		t.work.AddAfter(r.key, wait)
		return d, false, nil
	}
	return d, true, nil
}

// afterDecide lets the kind refine d from the previous decision, and says
// whether the result changes it; t.decide must be held. An unchanged
// decision is not written again (an unschedulable one is retried later).
func (s *Service) afterDecide(t *term, r *recon, d api.PlacementDecision) (api.PlacementDecision, bool) {
	s.phase(r.key, "after-decide")
	d = r.kind.afterDecide(s, t, r, d)
	if r.prev != nil && sameDecision(r.prev, &d) {
		if d.Unschedulable {
			t.work.AddAfter(r.key, RetryUnschedulable)
		}
		return d, false
	}
	return d, true
}

// write stores d over the previous placement with a compare-and-set, and
// returns its revision; ok is false when d was not written. A failed
// write gives back what the decision assumed (undo); a conflict (a stale
// revision read) sends the key back to look again.
func (s *Service) write(ctx context.Context, t *term, r *recon, d *api.PlacementDecision, undo func()) (rev uint64, ok bool, err error) {
	s.phase(r.key, "write")
	b, err := json.Marshal(d)
	if err != nil {
		undo()
		return 0, false, err
	}
	rev, err = bus.CompareAndSet(ctx, s.placements, r.key, b, r.prevRev)
	if err != nil {
		undo()
	}
	if errors.Is(err, bus.ErrConflict) {
		t.work.Add(r.key)
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("write placement %s: %w", r.key, err)
	}
	if d.Unschedulable {
		t.work.AddAfter(r.key, RetryUnschedulable)
	}
	s.log.Debug("placed", "key", r.key, "generation", d.Generation, "shards", d.Shards, "unschedulable", d.Unschedulable)
	return rev, true, nil
}

// remove is the write phase of a workload that is gone: its placement
// goes, and with it the shards. Its room is free: waiting work looks
// again now, in tier order, not at its next retry.
func (s *Service) remove(ctx context.Context, t *term, key string) error {
	s.phase(key, "write")
	if err := s.placements.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete placement %s: %w", key, err)
	}
	t.forget(key)
	s.forgetRank(key)
	s.forgetWorkload(key)
	for _, k := range t.pendingKeys() {
		t.work.Add(k)
	}
	return nil
}

// announce makes sure the events of placement d, at rev, are out: the
// kind's own, then the placement's. When this reconcile has just written
// d (written), no event can be out for a revision this new, so they are
// published without looking first (under the same message ids as Ensure,
// so a retry is deduplicated); otherwise each is ensured, and nothing is
// sent when this term has announced rev already.
func (s *Service) announce(ctx context.Context, t *term, r *recon, d *api.PlacementDecision, rev uint64, written bool) error {
	s.phase(r.key, "announce")
	key := r.w.Key()
	if !written && t.announcedAt(key) >= rev {
		return nil
	}
	if err := r.kind.announce(ctx, s, r.w, d, rev, written); err != nil {
		return err
	}
	event, msg := eventOf(r.w, d)
	publish := s.events.Ensure
	if written {
		publish = s.events.Publish
	}
	if err := publish(ctx, r.w, event, msg, rev); err != nil {
		return fmt.Errorf("announce placement of %s: %w", key, err)
	}
	t.announced(key, rev)
	return nil
}

// check is the replay queue's reconcile: a key whose placement still
// stands only gets its events ensured; any other goes to the work queue,
// as does a kind whose timers run there (kindHooks.replays) and an
// undecodable workload (the reconcile logs it). With deferOld, a
// placement written before the term's announce window (term.recentFrom)
// whose events this term has not ensured yet goes to the later queue
// instead, which ensures them at Options.AnnounceRate: a new term's replay
// then asks the events stream only about the placements of the last
// minutes, which a replica that died may have left unannounced, not about
// every placement of the region (at 100,000 workloads those requests kept
// an App submitted during a scheduler's restart waiting 19-28 s).
func (s *Service) check(ctx context.Context, t *term, key string, deferOld bool) error {
	s.phase(key, "check")
	w, wok, err := s.workload(key)
	pe, pok := s.placementM.Get(key)
	if !wok || !pok || err != nil {
		t.work.Add(key)
		return nil
	}
	r := &recon{key: key, w: w, kind: s.kinds.of(w.Kind), prev: &api.PlacementDecision{}, prevRev: pe.Revision}
	if !r.kind.replays() {
		t.work.Add(key)
		return nil
	}
	if err := json.Unmarshal(pe.Value, r.prev); err != nil || !s.stillGood(r.prev, w, s.snapshot(t)) {
		t.work.Add(key)
		return nil
	}
	if deferOld && r.prevRev < t.recentFrom && t.announcedAt(key) < r.prevRev {
		t.later.Add(key)
		return nil
	}
	return s.announce(ctx, t, r, r.prev, r.prevRev, false)
}

// eventOf is the event a placement warrants, and its message.
func eventOf(w *api.Workload, d *api.PlacementDecision) (event, msg string) {
	switch {
	case d.Unschedulable:
		return api.EventUnschedulable, fmt.Sprintf("no cluster can take it: %d rejections", len(d.Reasons))
	case w.Control.Stopped:
		return api.EventScheduled, "stopped: no shards"
	default:
		return api.EventScheduled, fmt.Sprintf("%d shards", len(d.Shards))
	}
}

// finished says whether a run-to-completion workload of this generation
// is done: its placement stays, so a lost cluster does not re-run it.
func (s *Service) finished(ctx context.Context, r *recon) bool {
	if !r.kind.finishes() {
		return false
	}
	w := r.w
	e, err := s.status.Get(ctx, r.key)
	if err != nil {
		return false
	}
	var st api.Status
	if json.Unmarshal(e.Value(), &st) != nil || st.Generation != w.Metadata.Generation {
		return false
	}
	return st.Phase == api.PhaseSucceeded || st.Phase == api.PhaseFailed
}

// stillGood says whether a previous decision stands: same generation,
// placed, and every shard's cluster still healthy. A cordoned cluster keeps
// the shards it has; it only takes no new ones. An App whose claims wait
// for a lost zone (api.WaitsOnZoneLoss) keeps its shards in unhealthy
// clusters: its replicas there stay pending until the zone returns.
func (s *Service) stillGood(prev *api.PlacementDecision, w *api.Workload, snap []*api.ClusterInfo) bool {
	if prev.Generation != w.Metadata.Generation || prev.Unschedulable {
		return false
	}
	for _, sh := range prev.Shards {
		i := slices.IndexFunc(snap, func(c *api.ClusterInfo) bool { return c.Name == sh.Cluster })
		if i < 0 || (!snap[i].Healthy && !api.WaitsOnZoneLoss(w)) {
			return false
		}
	}
	return s.kinds.of(w.Kind).stands(s, prev, w, snap)
}

func sameDecision(a, b *api.PlacementDecision) bool {
	// A queue position alone is no new decision: it is as of the last one.
	ja, _ := json.Marshal([]any{a.Generation, a.Shards, a.Unschedulable, a.Reasons, a.Queue, a.PreemptedBy})
	jb, _ := json.Marshal([]any{b.Generation, b.Shards, b.Unschedulable, b.Reasons, b.Queue, b.PreemptedBy})
	return bytes.Equal(ja, jb)
}
