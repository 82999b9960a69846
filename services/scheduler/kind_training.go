package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/scheduler/framework"
)

// The TrainingJob: a gang placed whole in one cluster, admitted whole.
//
// Placement. divideGang gives the gang to the best candidate that has room
// for every worker (room counts the pods' requests and, for GPU workers,
// the free GPUs of the requested type); it is never split. When no
// candidate has room for all, the decision is unschedulable and its
// reasons say, per cluster, how many workers fit ("no cluster fits 4
// workers of 1 GPU each: zone-a fits 3, ...").
//
// waitForPodsReady lives here, in the scheduler, for three reasons. The
// remedy is a placement change (the placement emptied, so the propagator
// removes the Job and the Service from the cluster), and the scheduler is
// the placements bucket's only writer: any other owner would have to ask
// it. The scheduler already holds the one lease under which placements
// change, so a timeout and a re-placement can never race. And the state
// the rule needs (the attempt, when it was placed, the requeue count, the
// next attempt) belongs with the placement it is about: it is kept in the
// placement (api.GangState), so a new term of another replica carries on
// where the last stopped. The scheduler reads the gang's progress from the
// aggregator's folded status (bucket status, ranks of the current attempt)
// and re-checks a placed gang every gangPoll until it is all Running.
//
// Quota. Admission reserves a workload's demand (workers x pod requests)
// when it is stored, and releases it when it is deleted or stopped. A gang
// taken down releases its reservation here (quota's release endpoint,
// before the empty placement is written, so a lost write only repeats an
// idempotent release), and its placement records QuotaReleased. When its
// backoff is over, the scheduler reserves the demand again (a reserve sets
// the key's demand, it does not add), and places it only once that is
// granted; a refusal keeps it waiting with the quota's reason. So while
// requeued the gang holds no quota, as Kueue's evicted workloads do. An
// update of the workload while it is requeued may make admission reserve
// again early; the gang then holds its quota while it waits, never twice.
//
// Failures. FailGang: the Job has backoffLimit 0, so one failed worker
// fails the Job, the aggregator reports Failed, and a finished workload's
// placement stays. RestartGang: the scheduler writes a new attempt in the
// same cluster (a new pod template: the propagator replaces the Job), up
// to maxRestarts; then the gang is left Failed.

// gangPoll is how often a placed gang that is not all Running yet (or
// whose failure policy may restart it) is looked at again.
const gangPoll = 2 * time.Second

// trainingKind is the TrainingJob's hooks.
type trainingKind struct{ defaults }

func (trainingKind) divide(w *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard {
	return divideGang(w, fw, cands)
}

// gate runs the gang's rules (gang) before the ordinary ones.
func (trainingKind) gate(ctx context.Context, s *Service, t *term, r *recon) (bool, error) {
	return s.gang(ctx, t, r)
}

// afterDecide makes a new decision (one that differs from the previous)
// a new attempt of the gang (carryGang), and looks at it again within
// gangPoll, as its ready timeout runs.
func (trainingKind) afterDecide(_ *Service, t *term, r *recon, d api.PlacementDecision) api.PlacementDecision {
	if r.prev != nil && sameDecision(r.prev, &d) {
		return d
	}
	carryGang(r.prev, &d, d.Decided)
	t.work.AddAfter(r.key, gangPoll)
	return d
}

// announce sends the gang's restart and, for a placement that took it
// down, its time-out and requeue (announceGang). A restart stays in every
// later placement of that attempt, so it is ensured even after a write.
func (trainingKind) announce(ctx context.Context, s *Service, w *api.Workload, d *api.PlacementDecision, rev uint64, written bool) error {
	if written {
		return s.announceRestart(ctx, w, d, true)
	}
	return s.announceGang(ctx, w, d, rev, true)
}

// replays is false: a gang's timers run in the work queue.
func (trainingKind) replays() bool { return false }

// gangRoom is how many of the workload's pods cluster c has room for,
// counting for GPU workers only the GPUs of the requested type, node by
// node as far as the inventory tells (a pool's free GPUs, and no more
// per node than its emptiest node has free).
func gangRoom(fw *framework.Workload, c *api.ClusterInfo) int64 {
	room := framework.PodsThatFit(fw, c)
	gpus := fw.PerPod.GPUs
	gpuType := ""
	if h := fw.Placement.Hardware; h != nil {
		gpuType = h.GPUType
		gpus = max(gpus, h.GPUs)
	}
	if gpus <= 0 {
		return room
	}
	var fit int64
	for _, p := range c.Pools {
		if gpuType != "" && p.GPUType != gpuType || p.Allocatable.GPUs == 0 {
			continue
		}
		free := p.Allocatable.GPUs - p.Requested.GPUs
		perNode := p.MaxNodeFree.GPUs / gpus
		fit += min(max(free, 0)/gpus, perNode*int64(max(p.ReadyNodes, 1)))
	}
	return min(room, fit)
}

// divideGang gives every worker to the best candidate with room for all
// of them; nil when there is none (DecideWith then explains it with
// gangRejections).
func divideGang(w *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard {
	n := int64(fw.Pods)
	for _, c := range cands {
		if gangRoom(fw, c.cluster) >= n {
			return []api.Shard{{Cluster: c.cluster.Name, Zone: c.cluster.Zone, Replicas: int32(n)}}
		}
	}
	return nil
}

// gangRejections says why no candidate takes the gang: one reason per
// candidate, and a summary naming what each cluster fits.
func gangRejections(fw *framework.Workload, cands []candidate, rejected []api.Rejection) []api.Rejection {
	what := "workers"
	if g := fw.PerPod.GPUs; g > 0 {
		what = fmt.Sprintf("workers of %d GPU", g)
		if h := fw.Placement.Hardware; h != nil && h.GPUType != "" {
			what = fmt.Sprintf("workers of %d %s GPU", g, h.GPUType)
		}
	}
	var out, parts []string
	var rs []api.Rejection
	for _, c := range cands {
		room := gangRoom(fw, c.cluster)
		rs = append(rs, api.Rejection{Cluster: c.cluster.Name, Filter: "Gang",
			Reason: fmt.Sprintf("fits %d of the gang's %d workers; a gang is never split", room, fw.Pods)})
		parts = append(parts, fmt.Sprintf("%s fits %d", c.cluster.Name, room))
	}
	slices.Sort(parts)
	out = append(out, parts...)
	seen := map[string]bool{}
	for _, r := range rejected {
		if r.Cluster != "" && !seen[r.Cluster] {
			seen[r.Cluster] = true
			out = append(out, fmt.Sprintf("%s: %s", r.Cluster, r.Reason))
		}
	}
	summary := api.Rejection{Filter: "Gang", Reason: fmt.Sprintf("no cluster fits %d %s: %s", fw.Pods, what, strings.Join(out, "; "))}
	return append([]api.Rejection{summary}, rs...)
}

// carryGang gives a new TrainingJob decision its gang state: a placed
// one is a new attempt (Attempt+1, placed now), the counters carried
// within a generation; an unplaced one keeps the counters.
func carryGang(prev *api.PlacementDecision, d *api.PlacementDecision, now time.Time) {
	g := api.GangState{}
	if prev != nil && prev.Gang != nil {
		g = *prev.Gang
		if prev.Generation != d.Generation {
			g = api.GangState{Attempt: g.Attempt}
		}
	}
	g.NextAttempt, g.QuotaReleased = nil, false
	if len(d.Shards) > 0 {
		g.Attempt++
		g.PlacedAt, g.ReadyAt = now, nil
		for i := range d.Shards {
			d.Shards[i].Attempt = g.Attempt
		}
	}
	d.Gang = &g
}

// gangVerdict is what the gang's current attempt calls for.
type gangVerdict int

const (
	gangWait    gangVerdict = iota // not all Running, still within the timeout
	gangReady                      // all Running (first seen now)
	gangTimeout                    // not all Running past the timeout
	gangRestart                    // a worker failed; RestartGang may recreate it
	gangSteady                     // nothing to do (ready before, finished, failed for good)
)

// judgeGang decides what a placed gang's attempt calls for from its
// folded status (nil when there is none of this attempt yet).
func judgeGang(spec *api.TrainingJobSpec, g *api.GangState, st *api.Status, now time.Time) gangVerdict {
	var tr *api.TrainingStatus
	if st != nil && st.Training != nil && st.Training.Attempt == g.Attempt {
		tr = st.Training
	}
	if tr != nil {
		failed, running := false, 0
		for _, r := range tr.Ranks {
			switch r.Phase {
			case "Failed":
				failed = true
			case "Running", "Succeeded":
				running++
			}
		}
		if failed || st.Phase == api.PhaseFailed {
			policy, most := spec.Policy()
			if policy == api.GangRestart && g.Restarts < most {
				return gangRestart
			}
			return gangSteady
		}
		if g.ReadyAt == nil && running == int(spec.Workers) && len(tr.Ranks) == int(spec.Workers) {
			return gangReady
		}
	}
	if g.ReadyAt != nil {
		return gangSteady
	}
	if now.Sub(g.PlacedAt) >= spec.ReadyTimeout() {
		return gangTimeout
	}
	return gangWait
}

// gang runs a TrainingJob's gang rules before the ordinary reconcile; it
// reports whether it handled the key (then the reconcile is over).
func (s *Service) gang(ctx context.Context, t *term, r *recon) (bool, error) {
	w, prev, prevRev := r.w, r.prev, r.prevRev
	spec, ok := w.Spec.(*api.TrainingJobSpec)
	if !ok || prev == nil || prev.Gang == nil || w.Control.Stopped {
		return false, nil
	}
	key, now := w.Key(), time.Now().UTC()
	g := *prev.Gang
	if len(prev.Shards) == 0 {
		if g.NextAttempt == nil && !g.QuotaReleased {
			return false, nil // pending for room: the ordinary retry
		}
		if g.NextAttempt != nil && prev.Generation == w.Metadata.Generation {
			if wait := g.NextAttempt.Sub(now); wait > 0 {
				t.work.AddAfter(key, wait)
				return true, s.announce(ctx, t, r, prev, prevRev, false)
			}
		}
		// Backoff over: the quota first, then the ordinary decision.
		d := *prev
		if g.QuotaReleased {
			if err := s.reserveGang(ctx, w); err != nil {
				var refused *quotaRefused
				if !errors.As(err, &refused) {
					return true, err
				}
				d.Reasons = []api.Rejection{{Filter: "Quota", Reason: "requeued gang waits for quota: " + refused.msg}}
				d.Decided = now
				t.work.AddAfter(key, RetryUnschedulable)
				if sameDecision(prev, &d) {
					return true, s.announce(ctx, t, r, prev, prevRev, false)
				}
				return true, s.writeGang(ctx, t, w, &d, prevRev)
			}
		}
		g.NextAttempt, g.QuotaReleased = nil, false
		d.Gang = &g
		t.work.Add(key)
		return true, s.writeGang(ctx, t, w, &d, prevRev)
	}
	if prev.Generation != w.Metadata.Generation {
		return false, nil
	}
	st, err := s.readStatus(ctx, key)
	if err != nil {
		return true, err
	}
	switch judgeGang(spec, &g, st, now) {
	case gangWait:
		t.work.AddAfter(key, min(gangPoll, time.Until(g.PlacedAt.Add(spec.ReadyTimeout()))+10*time.Millisecond))
		return false, nil
	case gangReady:
		d := *prev
		g.ReadyAt = &now
		d.Gang = &g
		t.work.AddAfter(key, gangPoll)
		return true, s.writeGang(ctx, t, w, &d, prevRev)
	case gangTimeout:
		return true, s.takeDown(ctx, t, w, spec, prev, prevRev, now)
	case gangRestart:
		d := *prev
		d.Decided = now
		g.Restarts++
		g.Attempt++
		g.PlacedAt, g.ReadyAt = now, nil
		g.RestartedAfter = prevRev
		d.Shards = slices.Clone(prev.Shards)
		for i := range d.Shards {
			d.Shards[i].Attempt = g.Attempt
		}
		d.Gang = &g
		rev, err := s.writeGangRev(ctx, t, w, &d, prevRev)
		if err != nil || rev == 0 {
			return true, err
		}
		t.work.AddAfter(key, gangPoll)
		if err := s.announceRestart(ctx, w, &d, false); err != nil {
			t.unannounce(key) // the retry's announce sends it
			return true, err
		}
		return true, nil
	default:
		if st == nil || st.Phase != api.PhaseSucceeded && st.Phase != api.PhaseFailed {
			t.work.AddAfter(key, 5*gangPoll) // a worker may fail later
		}
		return false, nil
	}
}

// takeDown empties a timed-out gang's placement, releases its quota and
// requeues it with backoff.
func (s *Service) takeDown(ctx context.Context, t *term, w *api.Workload, spec *api.TrainingJobSpec, prev *api.PlacementDecision, prevRev uint64, now time.Time) error {
	g := *prev.Gang
	cluster := ""
	if len(prev.Shards) > 0 {
		cluster = prev.Shards[0].Cluster
	}
	// Release first: a lost write below repeats it, idempotently.
	if err := s.releaseGang(ctx, w); err != nil {
		return err
	}
	g.Requeues++
	next := now.Add(spec.BackoffFor(g.Requeues))
	g.NextAttempt, g.QuotaReleased, g.ReadyAt = &next, true, nil
	g.LastRequeue = fmt.Sprintf("attempt %d in %s: not all %d workers Running within %ds of its placement", g.Attempt, cluster, spec.Workers, spec.ReadyTimeoutSeconds)
	d := api.PlacementDecision{
		Key: prev.Key, Generation: prev.Generation, Decided: now, Unschedulable: true, Queue: prev.Queue,
		Reasons: []api.Rejection{{Filter: "WaitForPodsReady", Reason: fmt.Sprintf("requeued (%d) until %s: %s; its quota is released", g.Requeues, next.Format(time.RFC3339), g.LastRequeue)}},
		Gang:    &g,
	}
	rev, err := s.writeGangRev(ctx, t, w, &d, prevRev)
	if err != nil || rev == 0 {
		return err
	}
	t.forget(w.Key())
	t.work.AddAfter(w.Key(), time.Until(next))
	s.log.Info("gang timed out: taken down and requeued", "key", w.Key(), "attempt", g.Attempt, "requeues", g.Requeues, "next", next)
	if err := s.announceGang(ctx, w, &d, rev, false); err != nil {
		t.unannounce(w.Key()) // the retry's announce sends them
		return err
	}
	return nil
}

// announceGang publishes (or, with ensure, makes sure of) the events of a
// gang's take-down, stored with its placement d at rev: a replica that
// died between the write and the events has them sent by the next
// announce of that placement.
func (s *Service) announceGang(ctx context.Context, w *api.Workload, d *api.PlacementDecision, rev uint64, ensure bool) error {
	g := d.Gang
	if g == nil {
		return nil
	}
	if err := s.announceRestart(ctx, w, d, ensure); err != nil {
		return err
	}
	if !d.Unschedulable || !g.QuotaReleased || g.NextAttempt == nil || g.LastRequeue == "" {
		return nil
	}
	publish := s.events.Publish
	if ensure {
		publish = s.events.Ensure
	}
	if err := publish(ctx, w, api.EventGangTimeout, g.LastRequeue, rev); err != nil {
		return fmt.Errorf("announce gang timeout of %s: %w", w.Key(), err)
	}
	msg := fmt.Sprintf("requeue %d: placed again after %s; its quota is released meanwhile", g.Requeues, g.NextAttempt.Format(time.RFC3339))
	if err := publish(ctx, w, api.EventRequeued, msg, rev); err != nil {
		return fmt.Errorf("announce requeue of %s: %w", w.Key(), err)
	}
	return nil
}

// announceRestart publishes (or, with ensure, makes sure of) the event of
// the gang's last restart after a failed worker, while the restarted gang
// is placed. Its idempotency number is the placement revision the restart
// replaced (GangState.RestartedAfter), not the revision it wrote: every
// later write of the same attempt (the gang seen ready) still holds that
// restart, and Ensure publishes nothing once the stream holds this restart
// or a later one, so a replica that died between the restart's write and
// its event has it sent once by the next announce.
func (s *Service) announceRestart(ctx context.Context, w *api.Workload, d *api.PlacementDecision, ensure bool) error {
	spec, ok := w.Spec.(*api.TrainingJobSpec)
	g := d.Gang
	if !ok || g == nil || g.Restarts == 0 || g.RestartedAfter == 0 || d.Unschedulable || len(d.Shards) == 0 {
		return nil
	}
	_, most := spec.Policy()
	msg := fmt.Sprintf("a worker failed: the whole gang is recreated in %s (restart %d of %d)", d.Shards[0].Cluster, g.Restarts, most)
	publish := s.events.Publish
	if ensure {
		publish = s.events.Ensure
	}
	if err := publish(ctx, w, api.EventGangRestarted, msg, g.RestartedAfter); err != nil {
		return fmt.Errorf("announce gang restart of %s: %w", w.Key(), err)
	}
	return nil
}

// writeGang writes d over prevRev; a conflict sends the key back to the
// work queue.
func (s *Service) writeGang(ctx context.Context, t *term, w *api.Workload, d *api.PlacementDecision, prevRev uint64) error {
	_, err := s.writeGangRev(ctx, t, w, d, prevRev)
	return err
}

// writeGangRev is writeGang returning the new revision (0 after a conflict).
func (s *Service) writeGangRev(ctx context.Context, t *term, w *api.Workload, d *api.PlacementDecision, prevRev uint64) (uint64, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return 0, err
	}
	rev, err := bus.CompareAndSet(ctx, s.placements, d.Key, b, prevRev)
	if errors.Is(err, bus.ErrConflict) {
		t.work.Add(d.Key)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("write placement %s: %w", d.Key, err)
	}
	t.announced(d.Key, rev) // its own events are published by the caller
	return rev, nil
}

// readStatus reads the aggregator's status of key; nil when there is none.
func (s *Service) readStatus(ctx context.Context, key string) (*api.Status, error) {
	e, err := s.status.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read status %s: %w", key, err)
	}
	var st api.Status
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return nil, nil
	}
	return &st, nil
}

// quotaRefused is the quota service's refusal of a reservation.
type quotaRefused struct{ msg string }

func (e *quotaRefused) Error() string { return "quota refused: " + e.msg }

// reserveGang reserves the gang's demand again (a set, not an add).
func (s *Service) reserveGang(ctx context.Context, w *api.Workload) error {
	err := bus.QuotaReserve.Send(ctx, s.quota, api.QuotaReserve{Project: w.Metadata.Project, Key: w.Key(), Demand: api.DemandOf(w)})
	var re *bus.RemoteError
	if errors.As(err, &re) && re.Code < 500 {
		msg := re.Description
		var body api.ErrorBody
		if json.Unmarshal(re.Body, &body) == nil && body.Message != "" {
			msg = body.Message
		}
		return &quotaRefused{msg: msg}
	}
	if err != nil {
		return fmt.Errorf("reserve quota of %s: %w", w.Key(), err)
	}
	return nil
}

// releaseGang gives back the gang's reservation.
func (s *Service) releaseGang(ctx context.Context, w *api.Workload) error {
	if err := bus.QuotaRelease.Send(ctx, s.quota, api.QuotaRelease{Project: w.Metadata.Project, Key: w.Key()}); err != nil {
		return fmt.Errorf("release quota of %s: %w", w.Key(), err)
	}
	return nil
}
