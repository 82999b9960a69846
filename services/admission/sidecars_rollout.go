package admission

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// The sidecar rollout moves the running workloads to the current version
// of the managed sidecars. It runs in the admission replica holding
// SidecarLease, because moving a workload is a write of the workloads
// bucket, which admission alone writes: each move is an ordinary new
// generation (quota reserved for the new sidecars, an updated event
// naming the versions), so every service downstream handles it as any
// template change — for an App, its zone-by-zone rollout (the
// aggregator's), within its availability budget.
//
// Each tick (SidecarRolloutEvery) it reads the current version, the
// operators' control (api.SidecarControl, written by the gateway) and its
// own progress (api.SidecarProgress), and:
//  1. checks the health gate of the workloads it moved: a move is done
//     once the workload's status is of the moved generation with every
//     pod ready, and stays so for the version's bake time; a move not
//     healthy within the deadline fails, which pauses the rollout and,
//     with onFailure Rollback, returns that workload to the version it
//     ran;
//  2. unless paused or aborted, moves more workloads (oldest version
//     first, then by key) until MaxUnavailable are being moved;
//  3. writes the progress when it changed.
//
// All state is in the buckets, so a new lease holder resumes where the
// last one stopped.

// SidecarLease is the lease, in bus.BucketLeases, of the replica that
// runs the sidecar rollout.
const SidecarLease = "admission-sidecars"

// Sidecar rollout defaults.
const (
	// SidecarRolloutEvery is how often the rollout looks.
	SidecarRolloutEvery = 2 * time.Second
	// SidecarMoveDeadline is how long a moved workload may take to be
	// healthy on the new version before the health gate fails it.
	SidecarMoveDeadline = 5 * time.Minute
)

// sidecarTiming holds the rollout's periods; tests shorten them.
type sidecarTiming struct {
	every, deadline time.Duration
	// bake, when set, replaces the version's BakeSeconds.
	bake time.Duration
}

func (t sidecarTiming) bakeOf(v *api.SidecarVersion) time.Duration {
	if t.bake > 0 {
		return t.bake
	}
	return time.Duration(v.Rollout.BakeSeconds) * time.Second
}

// rollSidecars runs the rollout's ticks while ctx lasts (the lease's term).
func (s *Service) rollSidecars(ctx context.Context) {
	kv, err := s.bus.KV(ctx, bus.BucketSidecars)
	if err != nil {
		s.log.Warn("sidecar rollout: open bucket", "err", err)
		return
	}
	status, err := s.bus.KV(ctx, bus.BucketStatus)
	if err != nil {
		s.log.Warn("sidecar rollout: open status bucket", "err", err)
		return
	}
	t := time.NewTicker(s.sidecarTiming.every)
	defer t.Stop()
	for {
		if err := s.sidecarTick(ctx, kv, status, time.Now().UTC()); err != nil && ctx.Err() == nil {
			s.log.Warn("sidecar rollout tick", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readJSON reads key of kv into v; found false when it does not exist.
func readJSON(ctx context.Context, kv jetstream.KeyValue, key string, v any) (found bool, err error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return false, fmt.Errorf("decode %s: %w", key, err)
	}
	return true, nil
}

// sidecarTick is one look of the rollout at now.
func (s *Service) sidecarTick(ctx context.Context, kv, status jetstream.KeyValue, now time.Time) error {
	v := s.currentSidecars()
	if v == nil {
		return nil
	}
	var ctl api.SidecarControl
	if _, err := readJSON(ctx, kv, api.SidecarControlKey, &ctl); err != nil {
		return err
	}
	var p api.SidecarProgress
	if _, err := readJSON(ctx, kv, api.SidecarProgressKey, &p); err != nil {
		return err
	}
	before, _ := json.Marshal(p)
	if p.Version != v.Version {
		// A new version: a new rollout. Moves of the old one that are
		// not baked yet are left as they are (their workloads are moved
		// again, to this version).
		p = api.SidecarProgress{Version: v.Version, Phase: api.SidecarRolloutProgressing, ResumeSeq: ctl.ResumeSeq}
	}
	if ctl.ResumeSeq > p.ResumeSeq {
		p.ResumeSeq = ctl.ResumeSeq
		if p.Phase == api.SidecarRolloutPaused {
			p.Phase, p.Message = api.SidecarRolloutProgressing, ""
		}
	}

	// 1. The health gate of the moves in flight.
	moving := p.Moving[:0:0]
	for _, m := range p.Moving {
		healthy, err := s.movedHealthy(ctx, status, m)
		if err != nil {
			return err
		}
		switch {
		case healthy && m.ReadySince.IsZero():
			m.ReadySince = now
			moving = append(moving, m)
		case healthy && now.Sub(m.ReadySince) >= s.sidecarTiming.bakeOf(v):
			p.Done++
			s.log.Info("sidecar rollout: workload baked", "key", m.Key, "version", v.Version)
		case healthy:
			moving = append(moving, m)
		case now.Sub(m.Started) >= s.sidecarTiming.deadline:
			p.Phase = api.SidecarRolloutPaused
			p.Message = fmt.Sprintf("%s was not healthy on version %d within %s", m.Key, v.Version, s.sidecarTiming.deadline)
			s.log.Warn("sidecar rollout: health gate failed", "key", m.Key, "version", v.Version)
			if v.Rollout.OnFailure != api.SidecarOnFailureRollback {
				moving = append(moving, m) // kept: a resume gives it another deadline
				continue
			}
			if err := s.moveSidecars(ctx, kv, m.Key, m.From, fmt.Sprintf("managed sidecars rolled back from version %d to %d: not healthy within %s", v.Version, m.From, s.sidecarTiming.deadline)); err != nil {
				return err
			}
			p.RolledBack++
		default:
			m.ReadySince = time.Time{}
			moving = append(moving, m)
		}
	}
	// A resume gives the moves that failed a new deadline.
	if p.Phase == api.SidecarRolloutProgressing {
		for i := range moving {
			if now.Sub(moving[i].Started) >= s.sidecarTiming.deadline {
				moving[i].Started = now
			}
		}
	}
	p.Moving = moving

	// 2. More moves.
	switch {
	case ctl.Aborted >= v.Version:
		p.Phase, p.Message = api.SidecarRolloutAborted, ctl.Reason
	case ctl.Paused:
		p.Phase, p.Message = api.SidecarRolloutPaused, "paused: "+ctl.Reason
	}
	if (p.Phase == api.SidecarRolloutProgressing || p.Phase == api.SidecarRolloutComplete) && len(p.Moving) < max(1, v.Rollout.MaxUnavailable) {
		left, err := s.sidecarsBehind(ctx, v, p.Moving)
		if err != nil {
			return err
		}
		for _, w := range left {
			if len(p.Moving) >= max(1, v.Rollout.MaxUnavailable) {
				break
			}
			from := w.Metadata.SidecarVersion
			msg := fmt.Sprintf("managed sidecars moved from version %d to %d", from, v.Version)
			if err := s.moveSidecars(ctx, kv, w.Key(), v.Version, msg); err != nil {
				return err
			}
			cur, _, err := s.get(ctx, w.Key())
			if err != nil {
				return err
			}
			p.Moving = append(p.Moving, api.SidecarMove{Key: w.Key(), From: from, Generation: cur.Metadata.Generation, Started: now})
			s.log.Info("sidecar rollout: workload moved", "key", w.Key(), "from", from, "to", v.Version)
		}
		p.Phase = api.SidecarRolloutProgressing
		if len(left) == 0 && len(p.Moving) == 0 {
			p.Phase = api.SidecarRolloutComplete
		}
	}
	if p.Phase == api.SidecarRolloutComplete && len(p.Moving) > 0 {
		p.Phase = api.SidecarRolloutProgressing
	}

	// 3. The progress, when it changed.
	after, _ := json.Marshal(p)
	if string(before) == string(after) {
		return nil
	}
	p.Updated = now
	doc, _ := json.Marshal(p)
	if _, err := kv.Put(ctx, api.SidecarProgressKey, doc); err != nil {
		return fmt.Errorf("write sidecar progress: %w", err)
	}
	return nil
}

// movedHealthy says whether the workload of m runs m's generation with
// every pod ready (or has finished); a workload since deleted counts as
// healthy.
func (s *Service) movedHealthy(ctx context.Context, status jetstream.KeyValue, m api.SidecarMove) (bool, error) {
	var st api.Status
	found, err := readJSON(ctx, status, m.Key, &st)
	if err != nil || !found {
		if _, _, gerr := s.get(ctx, m.Key); errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return true, nil
		}
		return false, err
	}
	if st.Generation < m.Generation {
		return false, nil
	}
	switch st.Phase {
	case api.PhaseSucceeded, api.PhaseStopped, api.PhasePaused:
		return true, nil
	case api.PhaseRunning:
		return st.Ready >= st.Desired, nil
	}
	return false, nil
}

// sidecarsBehind lists the workloads whose sidecars are not version v's
// (oldest version first, then by key), without those being moved.
func (s *Service) sidecarsBehind(ctx context.Context, v *api.SidecarVersion, moving []api.SidecarMove) ([]*api.Workload, error) {
	keys, err := s.workloads.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*api.Workload
	for _, k := range keys {
		if slices.ContainsFunc(moving, func(m api.SidecarMove) bool { return m.Key == k }) {
			continue
		}
		w, _, err := s.get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if kd, ok := api.LookupKind(w.Kind); !ok || kd.NoPods || w.Metadata.SidecarVersion >= v.Version {
			continue
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b *api.Workload) int {
		return cmp.Or(cmp.Compare(a.Metadata.SidecarVersion, b.Metadata.SidecarVersion), cmp.Compare(a.Key(), b.Key()))
	})
	return out, nil
}

// moveSidecars writes key's workload with the sidecars of version n
// (admission's own configuration for 0): a new generation, its quota
// reserved, announced as updated with msg.
func (s *Service) moveSidecars(ctx context.Context, kv jetstream.KeyValue, key string, n int64, msg string) error {
	var sidecars func(kind, project string) []api.Container
	if n == 0 {
		sidecars = func(string, string) []api.Container { return append([]api.Container{}, s.cfg.Sidecars...) }
	} else {
		var v api.SidecarVersion
		found, err := readJSON(ctx, kv, api.SidecarVersionKey(n), &v)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("sidecar version %d is not in the history", n)
		}
		sidecars = v.For
	}
	var (
		res *reservation
		out *api.Workload
	)
	rev, err := bus.Update(ctx, s.workloads, key, func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, bus.ErrNoChange // deleted meanwhile
		}
		stored, err := api.Decode(cur)
		if err != nil {
			return nil, fmt.Errorf("decode stored %s: %w", key, err)
		}
		if res == nil {
			res = s.reservation(stored)
		}
		next, err := api.Decode(cur)
		if err != nil {
			return nil, err
		}
		next.Spec.PodTemplate().Sidecars = sidecars(next.Kind, next.Metadata.Project)
		next.Metadata.SidecarVersion = n
		if sameSpec(stored, next) && stored.Metadata.SidecarVersion == n {
			return nil, bus.ErrNoChange
		}
		if err := res.hold(ctx, stored, next); err != nil {
			return nil, err
		}
		next.Metadata.Generation = stored.Metadata.Generation + 1
		next.Metadata.Updated = time.Now().UTC()
		next.Metadata.Event, next.Metadata.EventMessage = api.EventUpdated, msg
		out = next
		return json.Marshal(next)
	})
	if res == nil {
		return err
	}
	_, err = s.settle(ctx, res, out, rev, err, key)
	return err
}
