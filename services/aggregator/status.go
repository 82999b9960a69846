package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
)

// shardView is what one cluster holds of a workload's shard.
type shardView struct {
	cluster, zone string
	healthy       bool
	desired       int32
	obs           observation // zero when the cluster holds nothing of it
}

// statusDoc is a status as stored in the status bucket: the api.Status
// (what every reader decodes) and the revision that entered its phase.
type statusDoc struct {
	api.Status
	// PhaseRevision is the status revision whose write entered Phase; 0
	// means this document's own revision. The phase's event carries it in
	// its idempotency key, so a repair republishes under the same key.
	PhaseRevision uint64 `json:"phaseRevision,omitempty"`
}

// storedStatus is what the folder knows of a stored status.
type storedStatus struct {
	rev      uint64
	body     []byte // the api.Status without Updated
	phase    string
	phaseRev uint64
}

// foldState is one term of the status lease: the mirrors of what it
// folds (the replica's, kept across its terms: Service.foldMirrors), its
// queues, and what it wrote and announced.
type foldState struct {
	s   *Service
	log *slog.Logger
	q   *bus.Queue // keys to fold: changes, and replayed keys handed over
	// replay holds the keys a term goes over at its start and on each
	// resync, handed to q a few at a time (handOver).
	replay *bus.Queue

	workloads, placements, observations, inventory *bus.Mirror

	folds atomic.Int64 // workload folds completed, for tests
	// live is set once the mirrors are loaded and the term has queued
	// every key itself: the mirrors' callbacks queue only from then on
	// (add), and may read the mirrors' fields, which were set before.
	live atomic.Bool

	mu        sync.Mutex
	written   map[string]storedStatus    // mu must be held: last status known per key
	announced map[string]string          // mu must be held: the event id ensured per key in this term
	blocked   map[string]map[string]bool // mu must be held: keys waiting for a cluster's term to sync
	health    map[string]bool            // mu must be held: each cluster's health as last folded
}

// leadFolding runs one term of the status lease.
func (s *Service) leadFolding(ctx context.Context) {
	f := &foldState{
		s: s, log: s.log.With("lease", LeaseStatus), q: bus.NewQueue(bus.Instrumented(s.metrics, "status")),
		replay:  bus.NewQueue(bus.Instrumented(s.metrics, "status-replay")),
		written: map[string]storedStatus{}, announced: map[string]string{},
		blocked: map[string]map[string]bool{}, health: map[string]bool{},
	}
	defer func() {
		s.foldLive.CompareAndSwap(f, nil) // the mirrors, kept, queue to no one until the next term
		f.q.Close()                       // also when the term ends before the queue runs
		f.replay.Close()
	}()
	start := time.Now()
	if !f.openMirrors(ctx) {
		return
	}
	// Every key is folded once at the start of a term, the most recently
	// written workloads first, through the replay queue, which hands a
	// key to the fold queue only while that holds fewer than
	// replayBacklog: a change seen after the term began waits behind at
	// most that many, not behind every workload of the region (at
	// 100,000 workloads: the mirrors' callbacks queued every key as they
	// loaded, oldest first, and an App submitted during an aggregator's
	// restart waited 24 s for its status; with the newest first in the
	// one queue, the next Apps' statuses waited behind the rest). Each
	// cluster's term marker first, so that a key waiting for a cluster's
	// sync is let go.
	f.live.Store(true)
	s.foldLive.Store(f)
	for _, k := range f.inventory.Keys() {
		f.q.Add("@" + k)
	}
	for _, k := range f.observations.Keys() {
		if !strings.Contains(k, ".") {
			f.q.Add("@" + k)
		}
	}
	for _, k := range f.workloads.KeysNewestFirst() {
		f.replay.Add(k)
	}
	s.setFolding(f)
	defer s.setFolding(nil)
	f.log.Info("folding statuses", "workloads", f.workloads.Len(), "ready_after", time.Since(start).Round(time.Millisecond))
	var wg sync.WaitGroup
	// Statuses of workloads deleted while no folder ran are forgotten too
	// (listed while the queues run: at 100,000 a listing takes seconds).
	wg.Go(func() {
		keys, err := s.status.ListKeys(ctx)
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn("list statuses", "err", err)
			}
			return
		}
		for k := range keys.Keys() {
			if _, ok := f.workloads.Get(k); !ok {
				f.replay.Add(k)
			}
		}
	})
	// Refold everything now and then: a missed change costs latency, never correctness.
	wg.Go(func() { f.workloads.Resync(ctx, Resync, f.replay, nil) })
	wg.Go(func() { f.replay.Run(ctx, 1, f.log, f.handOver) })
	f.q.Run(ctx, StatusWorkers, f.log, f.fold)
	wg.Wait()
}

// openMirrors mirrors what the folder reads and waits until every mirror
// holds every key: a workload or placement missing from a mirror still
// filling would read as deleted or unscheduled. Mirror callbacks only
// queue keys (a cluster's as "@<cluster>"): the workers read the mirrors.
func (f *foldState) openMirrors(ctx context.Context) bool {
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		err := f.mirror()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		f.log.Warn("mirror buckets", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(bus.Jitter(delay, 0.2)):
		}
	}
	for _, m := range []*bus.Mirror{f.workloads, f.placements, f.observations, f.inventory} {
		select {
		case <-ctx.Done():
			return false
		case <-m.Ready():
		}
	}
	return true
}

func (f *foldState) mirror() error {
	m, err := f.s.openFoldMirrors()
	if err != nil {
		return err
	}
	f.workloads, f.placements, f.observations, f.inventory = m.workloads, m.placements, m.observations, m.inventory
	return nil
}

// foldMirrors are what a status term folds from and a rollout term steps
// rollouts from (Service.foldMirrors).
type foldMirrors struct {
	workloads, placements, observations, inventory *bus.Mirror
}

func (m *foldMirrors) stop() {
	for _, mm := range []*bus.Mirror{m.workloads, m.placements, m.observations, m.inventory} {
		mm.Stop()
	}
}

// openFoldMirrors opens those of the fold mirrors not open yet and
// returns them. They outlive the terms that use them (until Stop), and
// their callbacks queue keys to the live terms only (foldLive,
// rolloutLive).
func (s *Service) openFoldMirrors() (foldMirrors, error) {
	s.mirrorsMu.Lock()
	defer s.mirrorsMu.Unlock()
	b, m := s.bus, &s.foldMirrors
	live := func(fold func(f *foldState, key string), rollout func(t *rolloutTerm, key string)) func(string) {
		return func(key string) {
			if f := s.foldLive.Load(); f != nil {
				fold(f, key)
			}
			if t := s.rolloutLive.Load(); t != nil && rollout != nil {
				rollout(t, key)
			}
		}
	}
	// Not a term's context: the mirrors are kept for the next term.
	ctx := context.Background()
	var err error
	if m.workloads == nil {
		if m.workloads, err = b.Mirror(ctx, bus.BucketWorkloads, live((*foldState).workloadChanged, (*rolloutTerm).add)); err != nil { // configuse.go
			return *m, err
		}
	}
	if m.placements == nil {
		if m.placements, err = b.Mirror(ctx, bus.BucketPlacements, live((*foldState).add, (*rolloutTerm).add)); err != nil {
			return *m, err
		}
	}
	if m.observations == nil {
		m.observations, err = b.Mirror(ctx, bus.BucketObservations, live(func(f *foldState, key string) {
			if cluster, wkey, ok := strings.Cut(key, "."); ok {
				f.add(wkey)
			} else {
				f.add("@" + cluster) // a term marker
			}
		}, func(t *rolloutTerm, key string) {
			if _, wkey, ok := strings.Cut(key, "."); ok {
				t.add(wkey)
			}
		}))
		if err != nil {
			return *m, err
		}
	}
	if m.inventory == nil {
		if m.inventory, err = b.Mirror(ctx, bus.BucketClusters, live(func(f *foldState, cluster string) { f.add("@" + cluster) }, nil)); err != nil {
			return *m, err
		}
	}
	return *m, nil
}

// replayBacklog is how many keys the fold queue may hold before the
// replay queue waits to hand it another (handOver).
const replayBacklog = 2 * StatusWorkers

// handOver moves a replayed key to the fold queue once that is short.
func (f *foldState) handOver(ctx context.Context, key string) error {
	for f.q.Len() >= replayBacklog {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	f.q.Add(key)
	return nil
}

// add queues key for a fold once the term is live; before, a change is
// in the mirrors, whose keys the term queues when they are loaded.
func (f *foldState) add(key string) {
	if f.live.Load() {
		f.q.Add(key)
	}
}

func (s *Service) setFolding(f *foldState) {
	s.mu.Lock()
	s.foldTerm = f
	s.mu.Unlock()
}

// folding returns the current folding term, nil when this replica does
// not hold the status lease.
func (s *Service) folding() *foldState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.foldTerm
}

// fold computes, stores and announces the status of one workload key, or
// handles a change of a cluster ("@<cluster>").
func (f *foldState) fold(ctx context.Context, key string) error {
	if cluster, ok := strings.CutPrefix(key, "@"); ok {
		f.clusterChanged(cluster)
		return nil
	}
	if _, _, _, err := api.ParseKey(key); err != nil {
		return nil // not a workload key of a kind this build knows
	}
	var w *api.Workload
	if e, ok := f.workloads.Get(key); ok {
		var err error
		if w, err = api.Decode(e.Value); err != nil {
			f.log.Warn("undecodable workload", "key", key, "err", err)
			return nil
		}
	}
	var p *api.PlacementDecision
	if e, ok := f.placements.Get(key); ok {
		p = &api.PlacementDecision{}
		if json.Unmarshal(e.Value, p) != nil {
			p = nil
		}
	}
	if w == nil {
		return f.forget(ctx, key)
	}
	if f.waitForSync(key, f.clustersOf(w, p)) {
		return nil
	}
	st := f.compute(w, p)
	phaseRev, wrote, err := f.write(ctx, w, st)
	if err != nil {
		return err
	}
	if hook := f.s.afterStatusWrite; hook != nil && wrote {
		if err := hook(key); err != nil {
			return err
		}
	}
	if err := f.announce(ctx, w, p, st, phaseRev); err != nil {
		return err
	}
	f.folds.Add(1)
	return nil
}

// clustersOf lists the clusters whose observations a workload's status
// reads: its shards', or every member's while it stops.
func (f *foldState) clustersOf(w *api.Workload, p *api.PlacementDecision) []string {
	if w.Control.Stopped {
		return slices.Sorted(maps.Keys(f.s.clusters))
	}
	if p == nil || p.Unschedulable {
		return nil
	}
	out := make([]string, 0, len(p.Shards))
	for _, sh := range p.Shards {
		out = append(out, sh.Cluster)
	}
	return out
}

// waitForSync reports whether a healthy member cluster among names has no
// synced term (no observer, or one whose caches are still filling); the
// key is then folded again when that cluster's marker turns synced.
func (f *foldState) waitForSync(key string, names []string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, name := range names {
		if _, member := f.s.clusters[name]; !member || !f.healthy(name) {
			continue
		}
		if m, ok := f.marker(name); ok && m.Synced {
			continue
		}
		if f.blocked[name] == nil {
			f.blocked[name] = map[string]bool{}
		}
		f.blocked[name][key] = true
		f.log.Debug("status waits for the cluster's caches", "key", key, "cluster", name)
		return true
	}
	return false
}

// clusterChanged refolds what a cluster's change concerns: the keys that
// waited for its term to sync, and every workload when its health flipped.
func (f *foldState) clusterChanged(name string) {
	f.mu.Lock()
	var keys []string
	if m, ok := f.marker(name); ok && m.Synced {
		keys = slices.Collect(maps.Keys(f.blocked[name]))
		delete(f.blocked, name)
	}
	healthy := f.healthy(name)
	was, known := f.health[name]
	f.health[name] = healthy
	f.mu.Unlock()
	if known && was != healthy {
		keys = f.workloads.Keys()
	}
	for _, k := range keys {
		f.q.Add(k)
	}
}

func (f *foldState) marker(cluster string) (marker, bool) {
	e, ok := f.observations.Get(cluster)
	if !ok {
		return marker{}, false
	}
	var m marker
	if json.Unmarshal(e.Value, &m) != nil {
		return marker{}, false
	}
	return m, true
}

// healthy reports a member cluster's health as its inventory says (true
// before its first inventory); false for a cluster that is not a member.
func (f *foldState) healthy(cluster string) bool {
	if _, ok := f.s.clusters[cluster]; !ok {
		return false
	}
	e, ok := f.inventory.Get(cluster)
	if !ok {
		return true
	}
	var ci api.ClusterInfo
	if json.Unmarshal(e.Value, &ci) != nil {
		return true
	}
	return ci.Healthy
}

// observation returns what cluster holds of the workload key, with the
// part of its kind k (nil: without).
func (f *foldState) observation(k kind, cluster, key string) (observation, bool) {
	e, ok := f.observations.Get(observationKey(cluster, key))
	if !ok {
		return observation{}, false
	}
	o, err := decodeObservation(k, e.Value)
	if err != nil {
		f.log.Warn("undecodable observation", "cluster", cluster, "key", key, "err", err)
		return observation{}, false
	}
	return o, true
}

// compute folds a workload's status from its placement and observations.
func (f *foldState) compute(w *api.Workload, p *api.PlacementDecision) api.Status {
	st := api.Status{Key: w.Key(), Generation: w.Metadata.Generation, Desired: w.Spec.Pods(), Phase: api.PhasePending}
	switch {
	case !api.Placed(w.Kind):
		// A policy kind (a Scaler) runs nothing: it is in force once stored.
		st.Phase = api.PhaseRunning
		st.Conditions = append(st.Conditions, api.Condition{Type: "Placed", Status: false, Reason: "NotPlaced",
			Message: fmt.Sprintf("a %s places nothing: another service acts on it", w.Kind)})
	case w.Control.Stopped:
		f.foldStopped(w, p, &st)
	case p == nil || p.Generation != w.Metadata.Generation && p.Unschedulable:
		st.Conditions = append(st.Conditions, api.Condition{Type: "Scheduled", Status: false, Reason: "Waiting", Message: "waiting for the scheduler"})
	case p.Unschedulable:
		st.Phase = api.PhaseUnscheduled
		st.Reasons = p.Reasons
		st.Conditions = append(st.Conditions, api.Condition{Type: "Scheduled", Status: false, Reason: "Unschedulable", Message: summarize(p.Reasons)})
		st.Conditions = append(st.Conditions, queuedConditions(p)...)
		setQueued(p, &st) // queue_status.go
	default:
		shards := f.shards(w, p)
		foldShards(f.s.kinds, w, shards, &st, f.log)
	}
	if k := f.s.kinds[w.Kind]; k != nil {
		k.placed(w, p, &st)
	}
	st.Conditions = append(st.Conditions, f.configConditions(w)...) // configuse.go
	st.ConfigVersions = w.Spec.PodTemplate().ConfigVersions
	st.Events = f.events(w.Key())
	return st
}

// foldShards folds the shards of a placed workload with its kind's fold.
func foldShards(kinds map[string]kind, w *api.Workload, shards []shardView, st *api.Status, log *slog.Logger) {
	st.Zones, st.Clusters = map[string]api.ZoneStatus{}, map[string]api.ZoneStatus{}
	k, ok := kinds[w.Kind]
	if !ok {
		log.Error("no status folder for kind", "kind", w.Kind, "key", w.Key())
		st.Conditions = append(st.Conditions, api.Condition{Type: "Folded", Status: false, Reason: "UnsupportedKind",
			Message: fmt.Sprintf("the aggregator cannot fold kind %s; one of %s", w.Kind, strings.Join(slices.Sorted(maps.Keys(kinds)), ", "))})
		return
	}
	k.fold(w, shards, st)
	foldConfigVersions(shards, st) // configuse.go
	if w.Control.Paused {
		foldPaused(k, w, shards, st)
	}
	images := map[string]bool{}
	for _, sh := range shards {
		for _, img := range sh.obs.Images {
			images[img] = true
		}
	}
	st.Images = slices.Sorted(maps.Keys(images))
}

// shards reads each placed shard's observation.
func (f *foldState) shards(w *api.Workload, p *api.PlacementDecision) []shardView {
	k := f.s.kinds[w.Kind]
	out := make([]shardView, 0, len(p.Shards))
	for _, sh := range p.Shards {
		v := shardView{cluster: sh.Cluster, zone: sh.Zone, desired: sh.Replicas, healthy: f.healthy(sh.Cluster)}
		if k != nil {
			v.desired = k.desired(sh)
		}
		v.obs, _ = f.observation(k, sh.Cluster, w.Key())
		out = append(out, v)
	}
	return out
}

// events merges the latest Kubernetes events of the workload's objects in
// every member cluster, oldest first.
func (f *foldState) events(key string) []api.Event {
	var out []api.Event
	for _, name := range slices.Sorted(maps.Keys(f.s.clusters)) {
		if o, ok := f.observation(nil, name, key); ok {
			out = append(out, o.Events...)
		}
	}
	slices.SortStableFunc(out, func(a, b api.Event) int { return a.Time.Compare(b.Time) })
	if len(out) > MaxEvents {
		out = out[len(out)-MaxEvents:]
	}
	return out
}

func addTo(st *api.Status, sh shardView, zs api.ZoneStatus) {
	z := st.Zones[sh.zone]
	z.Desired += zs.Desired
	z.Ready += zs.Ready
	z.Running += zs.Running
	z.Succeeded += zs.Succeeded
	z.Failed += zs.Failed
	for rev, n := range zs.Templates {
		if z.Templates == nil {
			z.Templates = map[string]int32{}
		}
		z.Templates[rev] += n
	}
	for img, n := range zs.Sidecars {
		if z.Sidecars == nil {
			z.Sidecars = map[string]int32{}
		}
		z.Sidecars[img] += n
	}
	st.Zones[sh.zone] = z
	st.Clusters[sh.cluster] = zs
	st.Ready += zs.Ready
	st.Running += zs.Running
	st.Succeeded += zs.Succeeded
	st.Failed += zs.Failed
}

// foldPaused turns the phase of a paused workload into Paused once every
// shard has let its pods go, as its kind says (kind.paused). Until then it
// is Progressing; a finished workload keeps its phase, and a sick cluster
// keeps Degraded.
func foldPaused(k kind, w *api.Workload, shards []shardView, st *api.Status) {
	done, final := k.paused(w, shards, st)
	if final {
		return
	}
	reason := "Pausing"
	switch {
	case st.Phase == api.PhaseDegraded:
	case done:
		st.Phase, reason = api.PhasePaused, "Paused"
	default:
		st.Phase = api.PhaseProgressing
	}
	st.Conditions = append(st.Conditions, api.Condition{Type: "Paused", Status: done, Reason: reason})
}

// foldStopped reports a stopped workload: Stopped once its placement of
// this generation has no shards and no object of it is left in any
// healthy cluster (an unreachable one is cleaned when it comes back);
// Progressing while they are removed. Nothing is desired.
func (f *foldState) foldStopped(w *api.Workload, p *api.PlacementDecision, st *api.Status) {
	st.Desired = 0
	left := int32(0)
	k := f.s.kinds[w.Kind]
	for _, name := range slices.Sorted(maps.Keys(f.s.clusters)) {
		if !f.healthy(name) {
			continue
		}
		o, ok := f.observation(k, name, w.Key())
		if !ok {
			continue
		}
		left += o.Pods
		st.Running += o.Running
		if k != nil {
			left += k.left(o.Part)
		}
	}
	if p != nil && p.Generation == w.Metadata.Generation && len(p.Shards) == 0 && left == 0 {
		st.Phase = api.PhaseStopped
		st.Conditions = append(st.Conditions, api.Condition{Type: "Stopped", Status: true, Reason: "Stopped", Message: "no object is left in any cluster; start it to run again"})
		return
	}
	st.Phase = api.PhaseProgressing
	st.Conditions = append(st.Conditions, api.Condition{Type: "Stopped", Status: false, Reason: "Stopping", Message: fmt.Sprintf("%d objects left in the member clusters", left)})
}

func summarize(rs []api.Rejection) string {
	if len(rs) == 0 {
		return "no member cluster can take it"
	}
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += "; "
		}
		out += fmt.Sprintf("%s: %s: %s", r.Cluster, r.Filter, r.Reason)
	}
	return out
}

// phaseEvents maps a phase reached to the event announcing it.
var phaseEvents = map[string]string{
	api.PhaseRunning:     api.EventRunning,
	api.PhaseDegraded:    api.EventDegraded,
	api.PhaseSucceeded:   api.EventSucceeded,
	api.PhaseFailed:      api.EventFailed,
	api.PhaseProgressing: api.EventProgressing,
}

// stored returns what the status bucket holds for key.
func (f *foldState) stored(ctx context.Context, key string) (storedStatus, bool, error) {
	f.mu.Lock()
	prev, known := f.written[key]
	f.mu.Unlock()
	if known {
		return prev, true, nil
	}
	e, err := f.s.status.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return storedStatus{}, false, nil
	}
	if err != nil {
		return storedStatus{}, false, fmt.Errorf("read status %s: %w", key, err)
	}
	var doc statusDoc
	if err := json.Unmarshal(e.Value(), &doc); err != nil {
		// Rewritten by the next write; its phase is unknown.
		return storedStatus{rev: e.Revision()}, true, nil
	}
	doc.Updated = time.Time{}
	body, _ := json.Marshal(doc.Status)
	prev = storedStatus{rev: e.Revision(), body: body, phase: doc.Phase, phaseRev: doc.PhaseRevision}
	if prev.phaseRev == 0 {
		prev.phaseRev = e.Revision()
	}
	return prev, true, nil
}

// write stores st if it differs from the stored status, with
// compare-and-set, and returns the revision that entered its phase and
// whether it wrote.
func (f *foldState) write(ctx context.Context, w *api.Workload, st api.Status) (uint64, bool, error) {
	key := st.Key
	prev, exists, err := f.stored(ctx, key)
	if err != nil {
		return 0, false, err
	}
	body, err := json.Marshal(st)
	if err != nil {
		return 0, false, fmt.Errorf("encode status %s: %w", key, err)
	}
	if exists && bytes.Equal(prev.body, body) {
		return prev.phaseRev, false, nil
	}
	doc := statusDoc{Status: st}
	doc.Updated = time.Now().UTC()
	if exists && prev.phase == st.Phase {
		doc.PhaseRevision = prev.phaseRev
	}
	full, err := json.Marshal(doc)
	if err != nil {
		return 0, false, fmt.Errorf("encode status %s: %w", key, err)
	}
	rev, err := bus.CompareAndSet(ctx, f.s.status, key, full, prev.rev)
	if err != nil {
		f.mu.Lock()
		delete(f.written, key) // re-read next time
		f.mu.Unlock()
		return 0, false, fmt.Errorf("write status %s: %w", key, err)
	}
	phaseRev := rev
	if doc.PhaseRevision != 0 {
		phaseRev = doc.PhaseRevision
	}
	f.mu.Lock()
	f.written[key] = storedStatus{rev: rev, body: body, phase: st.Phase, phaseRev: phaseRev}
	f.mu.Unlock()
	if prev.phase != st.Phase {
		f.log.Debug("phase changed", "key", key, "from", prev.phase, "to", st.Phase, "generation", w.Metadata.Generation)
	}
	return phaseRev, true, nil
}

// announce makes sure the event of the status's phase is in the stream,
// once: published now if the write that entered the phase was not
// followed by it (a crash, a takeover), skipped if it was.
func (f *foldState) announce(ctx context.Context, w *api.Workload, p *api.PlacementDecision, st api.Status, phaseRev uint64) error {
	ev, ok := phaseEvents[st.Phase]
	if !ok {
		return nil
	}
	key := w.Key()
	id := events.MsgID(key, ev, phaseRev)
	f.mu.Lock()
	done := f.announced[key] == id
	f.mu.Unlock()
	if done {
		return nil
	}
	if err := f.s.pub.EnsureAfter(ctx, w, ev, fmt.Sprintf("%d/%d ready", st.Ready, st.Desired), phaseRev, after(w, p, ev)...); err != nil {
		return fmt.Errorf("announce %s of %s: %w", ev, key, err)
	}
	f.mu.Lock()
	f.announced[key] = id
	f.mu.Unlock()
	return nil
}

// after lists the events one of which comes before a phase event ev of w:
// its own predecessors (propagated), except where w never gets those. A
// policy kind is never placed, so it follows the start of its generation;
// a workload placed in no cluster for its generation, because it wants no
// pods, has nothing propagated, so it follows its scheduled event. Either
// would otherwise wait events.DefaultMaxWait for an event that never
// comes, holding a status worker.
func after(w *api.Workload, p *api.PlacementDecision, ev string) []string {
	own := events.Predecessors(ev)
	switch {
	case len(own) == 0:
		return nil // an event that follows nothing in particular
	case !api.Placed(w.Kind):
		return events.GenerationStarts()
	case p != nil && !p.Unschedulable && p.Generation == w.Metadata.Generation && len(p.Shards) == 0:
		return []string{api.EventScheduled}
	}
	return own
}

// forget removes the status of a deleted workload once no healthy
// cluster holds any of its pods.
func (f *foldState) forget(ctx context.Context, key string) error {
	for _, name := range slices.Sorted(maps.Keys(f.s.clusters)) {
		if !f.healthy(name) {
			continue
		}
		if m, ok := f.marker(name); !ok || !m.Synced {
			f.q.AddAfter(key, time.Second) // not in the workloads mirror: no marker requeues it
			return nil
		}
		if o, ok := f.observation(nil, name, key); ok && o.Pods > 0 {
			return nil // pods still terminating; their deletion requeues the key
		}
	}
	_, exists, err := f.stored(ctx, key)
	if err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.written, key)
	delete(f.announced, key)
	f.mu.Unlock()
	if !exists {
		return nil
	}
	if err := f.s.status.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete status %s: %w", key, err)
	}
	return nil
}
