// Package propagator is the propagator service: it turns each shard of a
// placement into native objects in its member cluster with server-side
// apply, and removes shards a placement no longer wants. Every member
// cluster has its own queues, workers and circuit breaker, so a dead
// cluster never slows the others.
//
// Replicas share the clusters. Each member cluster has a lease,
// "propagator.<cluster>" (libs/bus/lease); a replica applies to a cluster
// only during a term of that cluster's lease: the cluster's queues are
// made when the lease is won and closed when it is lost, and a holder
// that cannot renew stops before another replica can take the lease, so
// two replicas never apply to one cluster at once. Every replica keeps
// what a term needs warm whether it holds a lease or not: memory mirrors
// of the workloads and placements buckets, and a metadata informer per
// cluster and kind on the platform's objects (labels and annotations
// only, without managed fields).
//
// New work first. A term has a work queue and a replay queue. The work
// queue gets what changed after the term began (placement changes, a
// deleted object to put back, retries) and, when the term starts, every
// key that has a shard here but no object yet. Everything else is
// replayed: the replay queue's workers only check a key against the
// informer cache, and send it to the work queue when the live object is
// not what the placement wants. An object carries the hash of what was
// rendered for it (AnnoSpecHash), so an unchanged shard costs no API call
// on a restart or a takeover, however many there are. Resync checks every
// shard once a period, to repair drift in fields the hash cannot see: it
// applies the shards whose object's generation moved since this term
// wrote it (or that this term has not written), and every shard once in
// FullResyncEvery periods, so that a quiet region's resync costs no API
// call however many shards it holds.
//
// Events. A workload is announced propagated once every shard's cluster
// holds an object with its shard's hash. One cluster announces each
// workload, its first shard's (the announcer): its holder checks, in its
// own informer caches, every shard's cluster after each reconcile of the
// key, and when any of those caches reports a new hash for the key. It
// publishes with events.Publisher.Ensure inside the reconcile, whose error
// fails the reconcile so that the queue retries; a term's replay ensures
// the event of every workload already propagated, so one whose event was
// lost in a crash is announced, with the same message id.
package propagator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/libs/events"
)

// Tunables.
const (
	// FieldManager owns the fields the propagator applies.
	FieldManager = "atoll-propagator"
	// WorkersPerCluster apply in parallel in each member cluster.
	WorkersPerCluster = 8
	// ReplayWorkersPerCluster check replayed keys in parallel in each
	// member cluster.
	ReplayWorkersPerCluster = 4
	// Resync checks every shard this often, to repair drift in the
	// clusters; the keys are spread over the period, never sent in a
	// burst. A pass applies a shard again only when its main object's
	// generation is not the one this term's last write left (someone else
	// changed its spec) or this term has not written it; one pass in
	// FullResyncEvery applies every shard, for the fields a generation
	// cannot see (labels, the objects applied beside the main one).
	Resync = 5 * time.Minute
	// FullResyncEvery makes every this many resync passes a full one.
	FullResyncEvery = 12
	// InformerSyncWait bounds how long Start waits for a cluster's objects
	// to be listed.
	InformerSyncWait = 5 * time.Second
	// LeasePrefix starts the name of each member cluster's lease.
	LeasePrefix = "propagator."
)

// LeaseName is the lease a replica holds to apply to cluster.
func LeaseName(cluster string) string { return LeasePrefix + cluster }

// Service is the propagator.
type Service struct {
	bus      *bus.Bus
	log      *slog.Logger
	events   *events.Publisher
	holder   string
	breakers *bus.BreakerSet[struct{}]
	// kinds are the kinds this propagator renders, by name (kinds.go).
	kinds map[string]kind

	// Lease tunes the elections (zero: the library's defaults); set it
	// before Start.
	Lease lease.Options

	workloads, placements *bus.Mirror
	// rollouts mirrors the Apps' zone-by-zone rollouts (rollout.go).
	rollouts *bus.Mirror
	// sidecarRollout mirrors the sidecar rollout's progress
	// (sidecars_zones.go).
	sidecarRollout *bus.TypedMirror[*api.SidecarProgress]
	// placementsLive is set once the placements mirror has replayed the
	// bucket: only changes after that are new work.
	placementsLive atomic.Bool
	// filled is closed once the mirrors are full and the informers have
	// listed (fillThenCampaign).
	filled  chan struct{}
	targets map[string]*target
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	metrics *bus.Metrics  // nil without an admin server
	apply   *applyMetrics // nil without an admin server

	// baseline holds the projects granted Pod Security baseline
	// (Config.BaselineProjects); read only after New.
	baseline map[string]bool
	// ingressClass is the class of the exposed Apps' Ingresses
	// (Config.IngressClass); read only after New.
	ingressClass string
	// keyring opens Secrets (Config.Keyring); nil when none was given.
	keyring SecretOpener
	// workloadsKV, admission and kekOps serve KEK rotation (kek.go).
	workloadsKV jetstream.KeyValue
	admission   *bus.Requester
	kekOps      *bus.Endpoints

	mu      sync.Mutex
	desired map[string]*desired // mu must be held: decoded, by key

	// endpoints mirrors the Apps' observed endpoints and health the
	// clusters' health (endpoints.go).
	endpoints *bus.TypedMirror[api.EndpointsObservation]
	health    *bus.TypedMirror[api.ClusterInfo]
	// serving holds the keys of the Apps that name a port, the only
	// ones the endpoint loops look at; healthyWas each cluster's health
	// as last seen, so that only a change of it wakes them (endpoints.go).
	serving    servingIndex
	healthMu   sync.Mutex
	healthyWas map[string]bool

	// region is the region's name (clusters.Member.Region), the pods'
	// ATOLL_REGION.
	region string
	// fence is the CronJob time fence (api.CronFenceFromEnv: the
	// scheduler's), also held by the CronJob kind.
	fence api.CronFence
	// retryMax caps a failing key's retry delay (EnvRetryMax; 0:
	// bus.RetryMax).
	retryMax time.Duration
	// resync and fullResyncEvery tune the resync (0: Resync and
	// FullResyncEvery); tests shorten them.
	resync          time.Duration
	fullResyncEvery int
}

// EnvRetryMax is the environment variable that, set to a positive
// duration, caps the retry delay of a key whose apply or delete fails
// (bus.RetryMax by default): a test region whose frozen cluster comes
// back has its stale objects removed seconds later, not up to half a
// minute.
const EnvRetryMax = "ATOLL_PROPAGATOR_RETRY_MAX"

// Config is the platform's configuration of the propagator.
type Config struct {
	// BaselineProjects are the projects a platform admin granted the Pod
	// Security level baseline (their pods may run as root); every other
	// project's namespace enforces restricted. Rendered pods are hardened
	// either way (harden).
	BaselineProjects []string
	// IngressClass is the ingress class of the Ingresses of exposed Apps
	// (expose.go): the class the member clusters' ingress controller
	// serves. "" is DefaultIngressClass.
	IngressClass string
	// Keyring opens Secrets' values to write them into member clusters
	// (libs/envelope; --kek-dir); without one, a workload naming a
	// Secret is not applied (configsync.go). An *envelope.Keyring also
	// rewraps their data keys for a new KEK (kek.go: atoll-admin
	// rotate-kek).
	Keyring SecretOpener
}

// NewWithConfig is New with the platform's configuration (nil: none).
func NewWithConfig(b *bus.Bus, log *slog.Logger, members clusters.Members, cfg *Config) (*Service, error) {
	s, err := New(b, log, members)
	if err != nil || cfg == nil {
		return s, err
	}
	for _, p := range cfg.BaselineProjects {
		s.baseline[p] = true
	}
	if cfg.IngressClass != "" {
		s.ingressClass = cfg.IngressClass
	}
	s.keyring = cfg.Keyring
	return s, nil
}

// New returns a propagator for the member clusters.
func New(b *bus.Bus, log *slog.Logger, members clusters.Members) (*Service, error) {
	cs := map[string]clients{}
	region := ""
	for _, m := range members {
		region = cmp.Or(region, m.Region)
		c, err := clientsFor(m)
		if err != nil {
			return nil, err
		}
		cs[m.Name] = c
	}
	s := newService(b, log, cs)
	s.region = region
	return s, nil
}

func newService(b *bus.Bus, log *slog.Logger, cs map[string]clients) *Service {
	log = log.With("component", "propagator")
	s := &Service{
		bus: b, log: log, events: events.NewPublisher(b, log, events.Options{}),
		holder: lease.NewHolderID("propagator"), filled: make(chan struct{}),
		breakers: bus.NewBreakerSet[struct{}](bus.BreakerPolicy{ConsecutiveFailures: 3, OpenFor: 5 * time.Second, Logger: log, IsFailure: isClusterFailure,
			IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) }}),
		kinds:    newKinds(),
		targets:  map[string]*target{},
		desired:  map[string]*desired{},
		baseline: map[string]bool{},

		ingressClass: DefaultIngressClass,
	}
	fence, err := api.CronFenceFromEnv(os.Getenv)
	if err != nil {
		log.Warn("ignoring the cronjob fence lease", "err", err)
	}
	s.fence = fence
	if v := os.Getenv(EnvRetryMax); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			s.retryMax = d
		} else {
			log.Warn("ignoring a retry delay that is not a positive duration", "env", EnvRetryMax, "value", v)
		}
	}
	s.kinds[api.KindCronJob] = cronJobKind{fence: fence}
	for name, c := range cs {
		s.targets[name] = newTarget(s, name, c)
	}
	return s
}

// Holder is this replica's name in the leases.
func (s *Service) Holder() string { return s.holder }

// Holds reports whether this replica applies to cluster now.
func (s *Service) Holds(cluster string) bool {
	t := s.targets[cluster]
	return t != nil && t.term.Load() != nil
}

// Start starts the mirrors and the informers and serves the propagator's
// endpoints, then returns: the replica is ready (its leases' state known)
// before its caches fill, as a Kubernetes controller is ready before its
// informers sync. In the background it waits until the mirrors hold the
// buckets and the informers have listed their clusters (at most
// InformerSyncWait for a cluster that does not answer), and only then
// campaigns for every member cluster's lease: a term finds its caches
// warm (new work is not queued behind their first fill), and a replica
// still filling never takes a lease a filled standby could take.
// The endpoints' handlers wait for the fill themselves (filled).
func (s *Service) Start(ctx context.Context) error {
	elector, err := s.bus.Elector(ctx, s.holder, s.Lease, s.log, s.metrics)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if s.workloads, err = s.bus.Mirror(rctx, bus.BucketWorkloads, s.workloadChanged); err != nil {
		cancel()
		return err
	}
	if s.placements, err = s.bus.Mirror(rctx, bus.BucketPlacements, s.placementChanged); err != nil {
		cancel()
		return err
	}
	if s.rollouts, err = s.bus.Mirror(rctx, bus.BucketRollouts, s.placementChanged); err != nil {
		cancel()
		return err
	}
	if s.sidecarRollout, err = bus.MirrorOf(rctx, s.bus, bus.BucketSidecars, api.SidecarProgressKey, decodeSidecarProgress, s.sidecarProgressChanged); err != nil {
		cancel()
		return err
	}
	if err = s.startEndpointMirrors(rctx); err != nil { // endpoints.go
		cancel()
		return err
	}
	for _, t := range s.targets {
		t.startInformers(rctx)
	}
	if err := s.startKEK(ctx); err != nil { // kek.go
		cancel()
		return err
	}
	s.wg.Go(func() { s.fillThenCampaign(rctx, elector) })
	return nil
}

// fillThenCampaign waits for the caches (Start's comment), then
// campaigns for every member cluster's lease until ctx ends.
func (s *Service) fillThenCampaign(ctx context.Context, elector *lease.Elector) {
	start := time.Now()
	if !s.mirrorsReady(ctx) {
		return
	}
	s.placementsLive.Store(true)
	var synced sync.WaitGroup
	for _, t := range s.targets {
		synced.Go(func() {
			sctx, done := context.WithTimeout(ctx, InformerSyncWait)
			defer done()
			if !t.informersSynced(sctx) {
				t.log.Warn("cluster objects not listed yet; starting without them", "waited", InformerSyncWait)
			}
		})
	}
	synced.Wait()
	if ctx.Err() != nil {
		return
	}
	close(s.filled)
	s.log.Info("caches ready", "workloads", s.workloads.Len(), "placements", s.placements.Len(), "elapsed", time.Since(start).Round(time.Millisecond))
	var wg sync.WaitGroup
	for _, t := range s.targets {
		wg.Go(func() { elector.RunShared(ctx, bus.UserPropagator, LeaseName(t.name), t.lead) })
	}
	wg.Wait()
}

// waitFilled waits until this replica's caches are full (fillThenCampaign)
// or ctx ends: the endpoints that read the mirrors answer only then.
func (s *Service) waitFilled(ctx context.Context) error {
	select {
	case <-s.filled:
		return nil
	case <-ctx.Done():
		return bus.Errorf(http.StatusServiceUnavailable, "Filling", "the propagator's caches are still filling: %v", ctx.Err())
	}
}

// Instrument records the service's metrics on a's registry; call it
// before Start.
func (s *Service) Instrument(a *admin.Server) {
	s.metrics = a.Metrics()
	s.apply = newApplyMetrics(a.Registerer())
	s.breakers.Instrument(s.metrics)
}

// Ready reports whether the replica serves: started and the state of
// every cluster's lease known. Its caches may still be filling (Start):
// Filled says when they are.
func (s *Service) Ready(ctx context.Context) error {
	names := make([]string, 0, len(s.targets))
	for _, name := range slices.Sorted(maps.Keys(s.targets)) {
		names = append(names, LeaseName(name))
	}
	return admin.LeaseKnown(s.bus, names...)(ctx)
}

// Filled reports whether the replica's caches are full, so that it
// campaigns for the clusters' leases.
func (s *Service) Filled() bool {
	select {
	case <-s.filled:
		return true
	default:
		return false
	}
}

// Stop ends every term and releases the leases for a standby to take at
// once; calls in flight finish. Then it closes its connections to the
// member clusters.
func (s *Service) Stop() {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
	s.stopKEK()
	for _, m := range []*bus.Mirror{s.workloads, s.placements, s.rollouts} {
		m.Stop()
	}
	s.sidecarRollout.Stop()
	s.endpoints.Stop()
	s.health.Stop()
	for _, t := range s.targets {
		t.close()
	}
}

// mirrorsReady waits until both mirrors hold the buckets; false when ctx
// ended first.
func (s *Service) mirrorsReady(ctx context.Context) bool {
	for _, m := range []*bus.Mirror{s.workloads, s.placements, s.rollouts} {
		select {
		case <-m.Ready():
		case <-ctx.Done():
			return false
		}
	}
	select {
	case <-s.sidecarRollout.Ready():
	case <-ctx.Done():
		return false
	}
	return true
}

// placementChanged hands a changed placement to every cluster this
// replica applies to: those with a shard, and those holding one. (Every
// cluster looks: one may be creating the shard of the previous placement
// right now, and holds it only once that create returns; its queue runs
// the key again after, and removes what the new placement no longer
// wants.)
func (s *Service) placementChanged(key string) {
	if !s.placementsLive.Load() {
		return // the mirror's first replay: each term replays on its own
	}
	if _, ok := s.placements.Get(key); !ok {
		s.mu.Lock()
		delete(s.desired, key)
		s.mu.Unlock()
	}
	for _, t := range s.targets {
		if tt := t.term.Load(); tt != nil {
			tt.work.Add(key)
		}
	}
	s.kickEndpoints(key)
	s.log.Debug("placement changed", "key", key)
}

// desired is what one workload should look like, as last read. Every
// placement of the region has one, and most (stopped workloads, pending
// ones) have no shard: for those the decoded workload and rollout, the
// pointer-rich part every collection scans, are not kept; nothing reads
// them without a shard.
type desired struct {
	workload  *api.Workload          // nil when there is no placement or no shard
	kind      kind                   // the workload's kind, nil when unknown or no workload
	placement *api.PlacementDecision // nil when there is no placement
	rev, wrev uint64                 // placement and workload revisions
	rollout   *api.Rollout           // an App's rollout, nil when none (rollout.go)
	rrev      uint64                 // its revision, 0 when none
	// sidecars is the sidecar rollout's progress, nil when none
	// (sidecars_zones.go), and srev its revision.
	sidecars *api.SidecarProgress
	srev     uint64
	// podSecurity is the Pod Security level of the workload's namespace,
	// which its pods are hardened for (harden.go).
	podSecurity string
	region      string // the region's name, for the pods' identity (identity.go)

	mu        sync.Mutex
	hashes    map[string]string // mu must be held: rendered hash by cluster
	announced bool              // mu must be held: propagated event is out
}

// nothing is the desired state of a key without a placement.
var nothing = &desired{}

// errWait says a placement is newer than the workload the mirror holds.
var errWait = errors.New("workload not current yet")

// desiredFor returns the desired state of key from the mirrors; errWait
// when the placement was made for a generation the workload mirror does
// not show yet (or the workload is gone and its placement going).
func (s *Service) desiredFor(key string) (*desired, error) {
	pe, ok := s.placements.Get(key)
	if !ok {
		return nothing, nil
	}
	we, wok := s.workloads.Get(key)
	s.mu.Lock()
	d := s.desired[key]
	s.mu.Unlock()
	if d != nil && wok && d.rev == pe.Revision && d.wrev == we.Revision && d.rrev == s.rolloutRev(key) && d.srev == s.sidecarRev() {
		return d, nil
	}
	var p api.PlacementDecision
	if err := json.Unmarshal(pe.Value, &p); err != nil {
		return nil, fmt.Errorf("undecodable placement %s: %w", key, err)
	}
	if !wok {
		// The mirror may lag the placement by a moment; a placement whose
		// workload is really gone is deleted by the scheduler, which
		// brings the key back here.
		return nil, errWait
	}
	w, err := api.Decode(we.Value)
	if err != nil {
		return nil, fmt.Errorf("undecodable workload %s: %w", key, err)
	}
	// A placement made for an older generation waits for the scheduler.
	if w.Metadata.Generation != p.Generation {
		return nil, errWait
	}
	d = &desired{placement: &p, rev: pe.Revision, wrev: we.Revision, region: s.region, hashes: map[string]string{}}
	d.sidecars, d.srev = s.sidecarProgress()
	if len(p.Shards) == 0 {
		// Nothing to render: the decoded documents are not kept (see desired).
		d.rrev = s.rolloutRev(key)
	} else {
		d.workload, d.kind = w, s.kinds[w.Kind]
		d.podSecurity = s.podSecurityLevel(w.Metadata.Project)
		d.rollout, d.rrev = s.rolloutOf(key)
	}
	s.mu.Lock()
	if _, still := s.placements.Get(key); still {
		s.desired[key] = d
	}
	s.mu.Unlock()
	return d, nil
}

func (d *desired) shard(cluster string) *api.Shard {
	if d.placement == nil || d.workload == nil {
		return nil
	}
	for i := range d.placement.Shards {
		if d.placement.Shards[i].Cluster == cluster {
			return &d.placement.Shards[i]
		}
	}
	return nil
}

// render returns the object of cluster's shard and its hash.
func (d *desired) render(cluster string) (object, error) {
	sh := d.shard(cluster)
	if sh == nil {
		return object{}, fmt.Errorf("%s has no shard in %s", d.workload.Key(), cluster)
	}
	if d.kind == nil {
		return object{}, fmt.Errorf("%s: %w %q", d.workload.Key(), errUnknownKind, d.workload.Kind)
	}
	o := d.renderShard(*sh)
	stamp(&o)
	d.kind.unhashed(&o, time.Now())
	d.mu.Lock()
	d.hashes[cluster] = o.hash
	d.mu.Unlock()
	return o, nil
}

// renderShard is the kind's render of sh with its pods given their probes,
// hooks and identity (serving.go) and hardened for their namespace's Pod
// Security level (harden.go), not stamped yet.
func (d *desired) renderShard(sh api.Shard) object {
	o := d.kind.render(d, sh)
	d.finish(&o, sh) // serving.go: probes, hooks, the pods' identity
	if ps := podSpecOf(o.obj); ps != nil {
		harden(ps, d.podSecurity)
	}
	return o
}

// hash returns the hash of cluster's shard, rendering it once.
func (d *desired) hash(cluster string) (string, error) {
	d.mu.Lock()
	h, ok := d.hashes[cluster]
	d.mu.Unlock()
	if ok {
		return h, nil
	}
	o, err := d.render(cluster)
	return o.hash, err
}

// announcer is the cluster whose holder announces the workload: its
// first shard's.
func (d *desired) announcer() string {
	if d.placement == nil || len(d.placement.Shards) == 0 {
		return ""
	}
	first := d.placement.Shards[0].Cluster
	for _, sh := range d.placement.Shards[1:] {
		first = min(first, sh.Cluster)
	}
	return first
}

func (d *desired) isAnnounced() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.announced
}

// announce publishes the propagated event of d once every shard's cluster
// shows the shard's hash in this replica's view; nothing otherwise (a
// later change of a cache brings the key back).
func (s *Service) announce(ctx context.Context, key string, d *desired) error {
	if d.workload == nil || len(d.placement.Shards) == 0 || d.isAnnounced() {
		return nil
	}
	for _, sh := range d.placement.Shards {
		t := s.targets[sh.Cluster]
		if t == nil {
			return nil // a cluster this replica is not configured with
		}
		want, err := d.hash(sh.Cluster)
		if err != nil {
			return nil
		}
		if got, _ := t.observed(key); got != want {
			return nil
		}
	}
	msg := fmt.Sprintf("%d shards applied", len(d.placement.Shards))
	if err := s.events.Ensure(ctx, d.workload, api.EventPropagated, msg, d.rev); err != nil {
		return fmt.Errorf("announce %s propagated: %w", key, err)
	}
	d.mu.Lock()
	d.announced = true
	d.mu.Unlock()
	s.log.Debug("announced propagated", "key", key, "rev", d.rev)
	return nil
}

// seen is called when cluster from's informer sees key's object get a new
// hash (or go): the announcer's holder, if here, looks again.
func (s *Service) seen(key string) {
	d, err := s.desiredFor(key)
	if err != nil || d.isAnnounced() {
		return
	}
	if t := s.targets[d.announcer()]; t != nil {
		if tt := t.term.Load(); tt != nil {
			tt.work.Add(key)
		}
	}
}
