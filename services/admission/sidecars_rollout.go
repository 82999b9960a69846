package admission

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// The sidecar rollout moves the running workloads to the current version
// of the managed sidecars, zone by zone across the region. It runs in the
// admission replica holding SidecarLease, because moving a workload is a
// write of the workloads bucket, which admission alone writes: each move
// is an ordinary new generation (quota reserved for the new sidecars, an
// updated event naming the versions).
//
// The stored workloads move at once; the zones move one at a time. A
// moved App records the version it ran and its sidecars
// (api.Metadata.SidecarPrevious), and the progress (api.SidecarProgress)
// lists the region's zones and which are open: the propagator renders a
// moved App's shard in a zone not open yet with its previous sidecars
// (api.SidecarProgress.HeldBack), so only the open zone's pods move (in
// place, when only images changed). A workload written during a rollout
// (a new one, or its owner's update) gets the current version in every
// zone (mutate clears SidecarPrevious): it runs one version only. Other
// kinds than App have no zone gate: they move in every zone at once.
//
// Each tick (SidecarRolloutEvery) it reads the current version, the
// operators' control (api.SidecarControl, written by the gateway) and its
// own progress, and:
//  1. at a rollout's start, lists the zones the Apps behind the version
//     run in, in name order (written before any workload moves); then,
//     unless paused or aborted, moves every workload behind the version
//     (an App with its previous sidecars recorded, while the rollout
//     runs);
//  2. the health gate of the open zone: once every moved App's pods
//     there are ready with the new sidecars (api.ZoneStatus.Sidecars,
//     the aggregator's), and stay so for the bake time, the zone is done
//     and the next zone opens in the same tick; a zone not healthy within
//     the deadline fails, which pauses the rollout and, with onFailure
//     Rollback, returns every moved workload to the version it ran (the
//     failed zone moves back, in place; the zones not opened never moved);
//  3. writes the progress when it changed, then publishes an event for
//     each step (api.EventSidecarZoneStarted, ...; sidecarEvent).
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

// EnvSidecarEvery and EnvSidecarDeadline, set to positive durations,
// replace SidecarRolloutEvery and SidecarMoveDeadline: a test region's
// rollout looks more often and fails a zone sooner.
const (
	EnvSidecarEvery    = "ATOLL_ADMISSION_SIDECAR_EVERY"
	EnvSidecarDeadline = "ATOLL_ADMISSION_SIDECAR_DEADLINE"
)

// sidecarTimingFromEnv returns the rollout's periods, the defaults unless
// the environment replaces them.
func sidecarTimingFromEnv(log *slog.Logger) sidecarTiming {
	t := sidecarTiming{every: SidecarRolloutEvery, deadline: SidecarMoveDeadline}
	for env, d := range map[string]*time.Duration{EnvSidecarEvery: &t.every, EnvSidecarDeadline: &t.deadline} {
		v := os.Getenv(env)
		if v == "" {
			continue
		}
		if p, err := time.ParseDuration(v); err == nil && p > 0 {
			*d = p
		} else {
			log.Warn("ignoring a period that is not a positive duration", "env", env, "value", v)
		}
	}
	return t
}

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
	rev, err := readProgress(ctx, kv, &p)
	if err != nil {
		return err
	}
	if err := s.ensureSidecarSteps(ctx, &p, rev); err != nil {
		return err
	}
	p.Steps = nil
	before, _ := json.Marshal(p)
	if p.Version != v.Version {
		// A new version: a new rollout. Workloads moved by the last one
		// are moved again, to this version, from what they run.
		p = api.SidecarProgress{Version: v.Version, Phase: api.SidecarRolloutProgressing, ResumeSeq: ctl.ResumeSeq}
	}
	if ctl.ResumeSeq > p.ResumeSeq {
		p.ResumeSeq = ctl.ResumeSeq
		if p.Phase == api.SidecarRolloutPaused {
			p.Phase, p.Message = api.SidecarRolloutProgressing, ""
			resumeZones(&p, now)
		}
	}
	switch {
	case ctl.Aborted >= v.Version:
		p.Phase, p.Message = api.SidecarRolloutAborted, ctl.Reason
	case ctl.Paused:
		p.Phase, p.Message = api.SidecarRolloutPaused, "paused: "+ctl.Reason
	}
	var steps []api.SidecarStep

	// 1. The stored workloads.
	behind, moved, err := s.sidecarWorkloads(ctx, v)
	if err != nil {
		return err
	}
	sts := map[string]*api.Status{}
	starting := p.Phase == api.SidecarRolloutProgressing && p.Zones == nil
	if starting {
		// The zones are listed (and written) a tick before any workload
		// moves, so the propagator never renders a moved App without
		// them.
		if err := readStatuses(ctx, status, slices.Concat(behind, moved), sts); err != nil {
			return err
		}
		p.Zones = zonesOf(sts)
		starting = len(p.Zones) > 0 // no zone: nothing to hold back
	}
	if !starting && (p.Phase == api.SidecarRolloutProgressing || p.Phase == api.SidecarRolloutComplete) {
		for _, w := range behind {
			var prev *api.SidecarPrevious
			if w.Kind == api.KindApp && p.Phase == api.SidecarRolloutProgressing {
				prev = &api.SidecarPrevious{Version: w.Metadata.SidecarVersion, Sidecars: w.Spec.PodTemplate().Sidecars}
			}
			msg := fmt.Sprintf("managed sidecars moved from version %d to %d", w.Metadata.SidecarVersion, v.Version)
			if err := s.moveSidecars(ctx, kv, w.Key(), v.Version, msg, prev); err != nil {
				return err
			}
			s.log.Info("sidecar rollout: workload moved", "key", w.Key(), "from", w.Metadata.SidecarVersion, "to", v.Version)
			if prev != nil {
				cur, _, err := s.get(ctx, w.Key())
				if err != nil {
					return err
				}
				moved = append(moved, cur)
			}
			p.Done++
		}
	}

	// 2. The health gate of the open zone, and the next zone.
	if !starting && p.Phase == api.SidecarRolloutProgressing {
		if err := readStatuses(ctx, status, moved, sts); err != nil {
			return err
		}
		var err error
		steps, err = s.sidecarZones(ctx, kv, v, &p, moved, sts, now)
		if err != nil {
			return err
		}
	}

	// 3. The progress, when it changed, and the steps' events.
	after, _ := json.Marshal(p)
	if string(before) == string(after) {
		return nil
	}
	p.Updated, p.Steps = now, steps
	doc, _ := json.Marshal(p)
	rev, err = kv.Put(ctx, api.SidecarProgressKey, doc)
	if err != nil {
		return fmt.Errorf("write sidecar progress: %w", err)
	}
	for _, st := range steps {
		if err := s.events.Publish(ctx, sidecarEventOf(p.Version, st.Zone), st.Event, st.Message, rev); err != nil {
			return fmt.Errorf("sidecar rollout event %s: %w", st.Event, err)
		}
	}
	s.sidecarEnsured.Store(rev)
	return nil
}

// readProgress reads the rollout's progress into p and returns its
// revision; 0 when there is none.
func readProgress(ctx context.Context, kv jetstream.KeyValue, p *api.SidecarProgress) (uint64, error) {
	e, err := kv.Get(ctx, api.SidecarProgressKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read sidecar progress: %w", err)
	}
	if err := json.Unmarshal(e.Value(), p); err != nil {
		return 0, fmt.Errorf("decode sidecar progress: %w", err)
	}
	return e.Revision(), nil
}

// sidecarEventOf is the workload a sidecar rollout event is about: one per
// version and zone (api.SidecarEventName).
func sidecarEventOf(version int64, zone string) *api.Workload {
	return &api.Workload{Kind: api.SidecarEventKind, Metadata: api.Metadata{
		Project: api.SidecarEventProject, Name: api.SidecarEventName(version, zone), Generation: version}}
}

// ensureSidecarSteps publishes the events of p's last change (written at
// rev) unless the stream holds them: what a rollout that stopped between
// writing its progress and publishing them left undone. Once per revision
// for this replica.
func (s *Service) ensureSidecarSteps(ctx context.Context, p *api.SidecarProgress, rev uint64) error {
	if rev == 0 || len(p.Steps) == 0 || s.sidecarEnsured.Load() == rev {
		return nil
	}
	for _, st := range p.Steps {
		if err := s.events.Ensure(ctx, sidecarEventOf(p.Version, st.Zone), st.Event, st.Message, rev); err != nil {
			return fmt.Errorf("sidecar rollout event %s: %w", st.Event, err)
		}
	}
	s.sidecarEnsured.Store(rev)
	return nil
}

// readStatuses reads the status of each of ws (of Kind App) into sts.
func readStatuses(ctx context.Context, status jetstream.KeyValue, ws []*api.Workload, sts map[string]*api.Status) error {
	for _, w := range ws {
		if w.Kind != api.KindApp {
			continue
		}
		var st api.Status
		found, err := readJSON(ctx, status, w.Key(), &st)
		if err != nil {
			return err
		}
		if found {
			sts[w.Key()] = &st
		}
	}
	return nil
}

// resumeZones lifts a pause the health gate took: a failed zone gets a
// new deadline; after a rollback the rollout starts over, every workload
// it returned being behind again.
func resumeZones(p *api.SidecarProgress, now time.Time) {
	for i := range p.Zones {
		z := &p.Zones[i]
		switch z.Phase {
		case api.SidecarZoneFailed:
			z.Phase, z.Started, z.Advanced, z.ReadySince, z.Finished = api.SidecarZoneMoving, now, now, time.Time{}, time.Time{}
		case api.SidecarZoneRolledBack:
			p.Zones = nil
			return
		}
	}
}

// zonesOf lists the zones the moved Apps run in, in name order, pending;
// an empty list (not nil) when none.
func zonesOf(sts map[string]*api.Status) []api.SidecarZone {
	names := map[string]bool{}
	for _, st := range sts {
		for z, zs := range st.Zones {
			if zs.Desired > 0 {
				names[z] = true
			}
		}
	}
	out := []api.SidecarZone{}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		out = append(out, api.SidecarZone{Name: n, Phase: api.SidecarZonePending})
	}
	return out
}

// sidecarZones runs the health gate of p's open zone and opens the next
// (step 2); it returns the steps taken.
func (s *Service) sidecarZones(ctx context.Context, kv jetstream.KeyValue, v *api.SidecarVersion, p *api.SidecarProgress, moved []*api.Workload, sts map[string]*api.Status, now time.Time) ([]api.SidecarStep, error) {
	var steps []api.SidecarStep
	was := p.Moving
	p.Moving = nil
	for {
		i := slices.IndexFunc(p.Zones, func(z api.SidecarZone) bool {
			return z.Phase != api.SidecarZoneDone
		})
		if i < 0 {
			p.Phase, p.Message = api.SidecarRolloutComplete, ""
			steps = append(steps, api.SidecarStep{Event: api.EventSidecarRolloutDone,
				Message: fmt.Sprintf("version %d runs in every zone (%d workloads moved)", v.Version, p.Done)})
			s.log.Info("sidecar rollout: done", "version", v.Version)
			return steps, nil
		}
		z := &p.Zones[i]
		keys, healthyApps := zoneHealth(z.Name, moved, sts)
		if z.Phase == api.SidecarZonePending {
			z.Phase, z.Started, z.Advanced, z.Through = api.SidecarZoneMoving, now, now, ""
			if n := v.Rollout.MaxUnavailable; n > 0 && n < len(keys) {
				z.Through = keys[n-1]
			}
			steps = append(steps, api.SidecarStep{Event: api.EventSidecarZoneStarted, Zone: z.Name,
				Message: fmt.Sprintf("zone %s moves to version %d (%d workloads, at most %d at once)", z.Name, v.Version, len(keys), max(1, v.Rollout.MaxUnavailable))})
			s.log.Info("sidecar rollout: zone started", "zone", z.Name, "version", v.Version, "through", z.Through)
			return steps, nil // its pods move from the next tick on
		}
		openMore(z, keys, healthyApps, max(1, v.Rollout.MaxUnavailable), now)
		p.Moving = movingIn(z, keys, healthyApps, moved, was, now)
		z.Workloads, z.Healthy = len(keys), len(healthyApps)
		healthy := z.Through == "" && z.Healthy == z.Workloads
		switch {
		case healthy && z.ReadySince.IsZero():
			z.Phase, z.ReadySince = api.SidecarZoneBaking, now
			return steps, nil
		case healthy && now.Sub(z.ReadySince) >= s.sidecarTiming.bakeOf(v):
			z.Phase, z.Finished = api.SidecarZoneDone, now
			steps = append(steps, api.SidecarStep{Event: api.EventSidecarZoneBaked, Zone: z.Name,
				Message: fmt.Sprintf("zone %s: %d workloads ready on version %d since %s", z.Name, z.Workloads, v.Version, z.ReadySince.Format(time.RFC3339Nano))})
			s.log.Info("sidecar rollout: zone baked", "zone", z.Name, "version", v.Version)
			continue // the next zone starts now
		case healthy:
			return steps, nil
		}
		z.Phase, z.ReadySince = api.SidecarZoneMoving, time.Time{}
		if now.Sub(maxTime(z.Started, z.Advanced)) < s.sidecarTiming.deadline {
			return steps, nil
		}
		// The health gate failed.
		z.Phase, z.Finished = api.SidecarZoneFailed, now
		p.Phase = api.SidecarRolloutPaused
		p.Message = fmt.Sprintf("zone %s: %d of %d workloads not healthy on version %d within %s", z.Name, z.Workloads-z.Healthy, z.Workloads, v.Version, s.sidecarTiming.deadline)
		steps = append(steps, api.SidecarStep{Event: api.EventSidecarZoneFailed, Zone: z.Name, Message: p.Message})
		s.log.Warn("sidecar rollout: health gate failed", "zone", z.Name, "version", v.Version)
		if v.Rollout.OnFailure != api.SidecarOnFailureRollback {
			return steps, nil
		}
		for _, w := range moved {
			prev := w.Metadata.SidecarPrevious
			msg := fmt.Sprintf("managed sidecars rolled back from version %d to %d: zone %s not healthy within %s", v.Version, prev.Version, z.Name, s.sidecarTiming.deadline)
			if err := s.moveSidecars(ctx, kv, w.Key(), prev.Version, msg, nil); err != nil {
				return steps, err
			}
			p.RolledBack++
		}
		z.Phase = api.SidecarZoneRolledBack
		steps = append(steps, api.SidecarStep{Event: api.EventSidecarRolledBack, Zone: z.Name,
			Message: fmt.Sprintf("zone %s: %d workloads returned to their previous version", z.Name, len(moved))})
		return steps, nil
	}
}

// zoneHealth lists the moved Apps with pods in zone, in key order, and
// those whose status is of their generation with every pod there ready
// and running their sidecars' images.
func zoneHealth(zone string, moved []*api.Workload, sts map[string]*api.Status) (keys []string, healthy map[string]bool) {
	healthy = map[string]bool{}
	for _, w := range moved {
		st := sts[w.Key()]
		if st == nil {
			continue
		}
		zs, ok := st.Zones[zone]
		if !ok || zs.Desired == 0 {
			continue
		}
		keys = append(keys, w.Key())
		if st.Generation < w.Metadata.Generation || zs.Ready < zs.Desired {
			continue
		}
		ok = true
		for _, c := range w.Spec.PodTemplate().Sidecars {
			if zs.Sidecars[api.SidecarImageKey(c.Name, c.Image)] < zs.Desired {
				ok = false
			}
		}
		if ok {
			healthy[w.Key()] = true
		}
	}
	slices.Sort(keys)
	return keys, healthy
}

// openMore opens the moving zone z to the next moved Apps (keys, in key
// order) while fewer than maxUnavailable of those it is open to are not
// healthy yet; Through becomes empty once it is open to all.
func openMore(z *api.SidecarZone, keys []string, healthy map[string]bool, maxUnavailable int, now time.Time) {
	if z.Through == "" {
		return
	}
	unhealthy := 0
	for _, k := range keys {
		if k <= z.Through && !healthy[k] {
			unhealthy++
		}
	}
	for z.Through != "" && unhealthy < maxUnavailable {
		i, _ := slices.BinarySearch(keys, z.Through+"\x00") // the first key after Through
		if i == len(keys) {
			z.Through = ""
			break
		}
		z.Through, z.Advanced = keys[i], now
		if !healthy[keys[i]] {
			unhealthy++
		}
	}
}

// movingIn lists the Apps the moving zone z is open to and that are not
// healthy there yet (at most maxUnavailable): the per-workload progress.
// An App listed before (was) keeps its start.
func movingIn(z *api.SidecarZone, keys []string, healthy map[string]bool, moved []*api.Workload, was []api.SidecarMove, now time.Time) []api.SidecarMove {
	byKey := map[string]*api.Workload{}
	for _, w := range moved {
		byKey[w.Key()] = w
	}
	var out []api.SidecarMove
	for _, k := range keys {
		w := byKey[k]
		if healthy[k] || !z.OpenTo(k) || w == nil || w.Metadata.SidecarPrevious == nil {
			continue
		}
		m := api.SidecarMove{Key: k, From: w.Metadata.SidecarPrevious.Version, Generation: w.Metadata.Generation, Started: now}
		if i := slices.IndexFunc(was, func(m api.SidecarMove) bool { return m.Key == k }); i >= 0 {
			m.Started = was[i].Started
		}
		out = append(out, m)
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sidecarWorkloads lists the workloads whose sidecars are behind version
// v (oldest version first, then by key), and the Apps the rollout of v
// moved (by key).
func (s *Service) sidecarWorkloads(ctx context.Context, v *api.SidecarVersion) (behind, moved []*api.Workload, err error) {
	keys, err := s.workloads.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, k := range keys {
		w, _, err := s.get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		kd, ok := api.LookupKind(w.Kind)
		switch {
		case !ok || kd.NoPods:
		case w.Metadata.SidecarVersion < v.Version:
			behind = append(behind, w)
		case w.Metadata.SidecarVersion == v.Version && w.Metadata.SidecarPrevious != nil:
			moved = append(moved, w)
		}
	}
	slices.SortFunc(behind, func(a, b *api.Workload) int {
		return cmp.Or(cmp.Compare(a.Metadata.SidecarVersion, b.Metadata.SidecarVersion), cmp.Compare(a.Key(), b.Key()))
	})
	return behind, moved, nil
}

// moveSidecars writes key's workload with the sidecars of version n
// (admission's own configuration for 0) and prev as what it ran before
// (nil: it runs n in every zone): a new generation, its quota reserved,
// announced as updated with msg.
func (s *Service) moveSidecars(ctx context.Context, kv jetstream.KeyValue, key string, n int64, msg string, prev *api.SidecarPrevious) error {
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
		next.Metadata.SidecarPrevious = prev
		if sameSpec(stored, next) && stored.Metadata.SidecarVersion == n && (stored.Metadata.SidecarPrevious == nil) == (prev == nil) {
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
