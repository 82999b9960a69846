// Package aggregator is the aggregator service, the only writer of the
// status, clusters and observations buckets: it watches the member
// clusters, folds each workload's shards into one status, and keeps each
// cluster's capacity and health in its inventory record.
//
// # Replicas and leases
//
// Any number of replicas run; leases (libs/bus/lease) split the work:
//
//   - "aggregator.<cluster>", one per member cluster, so that replicas
//     share the clusters. Its holder runs that cluster's informers, probes
//     it and writes its inventory (clusters bucket), and publishes what the
//     cluster holds of each workload as an observation (observations
//     bucket, key <cluster>.<workload key>: pod counts, the Deployment's or
//     Job's status, the latest Kubernetes events; cluster.go, observe.go).
//   - "aggregator-status", one for the region. Its holder folds, for each
//     workload, the observations of the clusters its shards are on into
//     one status (status bucket) and announces phase changes (status.go).
//     It reads no cluster: only the workloads, placements, observations
//     and clusters buckets, through in-memory mirrors it builds for its
//     term.
//
// A workload's shards are usually on clusters held by different replicas:
// splitting observing (per cluster) from folding (one writer of the status
// bucket) keeps each bucket key with one writer at a time, with no
// cross-replica compare-and-set on a shared document.
//
// # No phase regresses while a cache fills
//
// Observations are only ever computed from synced informer caches. A
// cluster holder's term begins by writing the cluster's term marker (key
// <cluster>) as syncing; it waits for its caches to sync
// (cache.WaitForCacheSync), rewrites every observation that differs from
// what its caches say (deleting those of workloads the cluster no longer
// holds), and only then marks the term synced. The folder starts only once
// its mirrors hold every key (a workload or placement missing from a
// mirror that is still filling would read as deleted or unscheduled), and
// leaves a workload's status untouched while a healthy cluster among its
// shards' has a term that is not synced; it refolds the cluster's
// workloads when the marker turns synced. So after a restart or a
// takeover, a Running workload is folded from the same synced
// observations as before, never from a half-filled cache, and a move back
// to Progressing only ever comes from an observation of a synced cache.
// An unhealthy cluster does not hold its workloads back: its last
// observation stands and they are Degraded.
//
// # Events follow committed state
//
// fold publishes the event of a status's phase (running, progressing,
// degraded, succeeded, failed) with events.Publisher.Ensure inside the
// reconcile, returning its error so the queue retries. The idempotency key
// is <key>.<event>@<rev> with rev the status revision that entered the
// phase (kept in the status document as phaseRevision; 0 means the
// document's own revision), so a folder that starts after a crash between
// the write and the publish, a takeover or a resync republishes a missing
// event under the same key, once, and a phase entered again gets a new one.
//
// # Requests
//
// Logs and exec (atoll.debug.*, queue group aggregator-debug) and cluster
// operations (the atoll-aggregator micro service, a queue group) are
// served by every replica, as every replica has every member's
// credentials: a cluster whose lease the replica holds is read from its
// synced informer caches, another by a live list against its API server.
// A cluster operation changes the inventory with compare-and-set, so it
// is safe on any replica beside the holder's probes.
//
// Both trust their caller: a debug session opened for a workload, or a
// cluster operation, is taken to be one the gateway has authorised for
// its user. That trust rests on the bus's permissions (libs/bus Grants):
// only the gateway's NATS user may publish to atoll.debug.* and to the
// aggregator's endpoints, and both answer only requests whose reply
// subject is in the gateway's inboxes (bus.Bus.OnlyFrom), because
// JetStream can deliver a message to any subject on another user's
// behalf (a consumer's deliver subject, a direct get's reply).
//
// # Kinds
//
// A kind is observed and folded by its entry in the kinds table
// (kinds.go, one file per kind; Kinds lists them; a test checks every
// placed kind has one). A workload of a kind without one gets a status
// saying so, never a panic.
package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/libs/debugstream"
	"atoll.dev/libs/events"
)

// Tunables.
const (
	// ProbeEvery is how often each cluster's /readyz is probed and its
	// inventory recomputed.
	ProbeEvery = 2 * time.Second
	// Grace is how long a cluster may fail its probes before it is marked
	// unhealthy and its shards are moved.
	Grace = 10 * time.Second
	// MaxEvents is how many Kubernetes events a status keeps.
	MaxEvents = 10
	// StatusWorkers fold statuses in parallel.
	StatusWorkers = 8
	// ObserveWorkers compute and write each held cluster's observations.
	ObserveWorkers = 4
	// Resync refolds every workload this often.
	Resync = 5 * time.Minute
)

// LeaseStatus is the lease of the replica that folds statuses; a member
// cluster's lease is ClusterLease(name).
const LeaseStatus = "aggregator-status"

// ClusterLease names the lease of a member cluster.
func ClusterLease(cluster string) string { return "aggregator." + cluster }

// Service is one aggregator replica.
type Service struct {
	bus      *bus.Bus
	log      *slog.Logger
	members  clusters.Members
	clusters map[string]*cluster // by name; fixed after New
	kinds    map[string]kind     // the kinds it observes and folds, by name (kinds.go)
	holder   string              // this replica's lease holder id
	pub      *events.Publisher

	// maxLogContainers is how many containers a log session may stream
	// (Config.MaxLogContainers; DefaultMaxLogContainers when 0).
	maxLogContainers int

	// leaseOpts and eventOpts are the defaults but in tests.
	leaseOpts lease.Options
	eventOpts events.Options
	// campaignFor, when set (tests), limits the leases this replica
	// campaigns for, so that a test can split them across replicas.
	campaignFor []string
	// afterStatusWrite, when set (tests), runs between a status write and
	// its event; an error ends the fold there, as a crash would.
	afterStatusWrite func(key string) error

	status, clusterKV, observations, workloadKV jetstream.KeyValue

	elector *lease.Elector
	ops     *bus.Endpoints      // the cluster-operations endpoint
	debug   *debugstream.Server // logs and exec sessions (debug.go)
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	metrics *bus.Metrics // nil without an admin server

	mu       sync.Mutex
	foldTerm *foldState // mu must be held: the current term of the status lease, nil when not held

	// foldMirrors are the status and rollout terms' mirrors, opened by
	// this replica's first such term and kept for its next (a lease lost
	// in a NATS restart and taken back at once finds them full: they
	// resume from the revision they had); stopped by Stop. The two terms
	// share them: each mirrored its own, and the region's workloads and
	// placements were held twice. mirrorsMu must be held to open them.
	mirrorsMu   sync.Mutex
	foldMirrors foldMirrors
	// foldLive is the status term the fold mirrors' callbacks queue to,
	// nil between terms and while a term loads; rolloutLive the rollout
	// term, nil between terms.
	foldLive    atomic.Pointer[foldState]
	rolloutLive atomic.Pointer[rolloutTerm]

	rolloutTick time.Duration // WithRolloutTick
}

// Option sets one of a replica's settings in New.
type Option func(*Service)

// New returns an aggregator replica for the member clusters.
func New(b *bus.Bus, log *slog.Logger, members clusters.Members, opts ...Option) (*Service, error) {
	s := &Service{
		bus: b, log: log.With("component", "aggregator"), members: members,
		clusters: map[string]*cluster{}, kinds: newKinds(), holder: lease.NewHolderID("aggregator"),
		rolloutTick: DefaultRolloutTick,
	}
	for _, o := range opts {
		o(s)
	}
	for _, m := range members {
		c, err := newCluster(s, m)
		if err != nil {
			return nil, err
		}
		s.clusters[m.Name] = c
	}
	return s, nil
}

// Config is the platform's configuration of the aggregator.
type Config struct {
	// MaxLogContainers is how many containers one log session may stream
	// at most (0: DefaultMaxLogContainers); a session over it is a 422
	// that says how to narrow it.
	MaxLogContainers int
}

// NewWithConfig is New with the platform's configuration (nil: the
// defaults).
func NewWithConfig(b *bus.Bus, log *slog.Logger, members clusters.Members, cfg *Config) (*Service, error) {
	s, err := New(b, log, members)
	if err != nil || cfg == nil {
		return s, err
	}
	s.maxLogContainers = cfg.MaxLogContainers
	return s, nil
}

// Start opens the buckets, campaigns for the status lease and every
// cluster's, and serves cluster operations and debug sessions.
func (s *Service) Start(ctx context.Context) error {
	if err := s.open(ctx); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	campaign := func(lease string, fn func(context.Context)) {
		if s.campaignFor == nil || slices.Contains(s.campaignFor, lease) {
			s.wg.Go(func() { s.elector.Run(rctx, lease, fn) })
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.clusters)) {
		// The replicas share the clusters (lease.Elector.RunShared).
		if l := ClusterLease(name); s.campaignFor == nil || slices.Contains(s.campaignFor, l) {
			s.wg.Go(func() { s.elector.RunShared(rctx, bus.UserAggregator, l, s.clusters[name].lead) })
		}
	}
	campaign(LeaseStatus, s.leadFolding)
	campaign(LeaseRollout, s.leadRollouts) // rollouts.go
	if err := s.startOps(rctx); err != nil {
		s.Stop()
		return err
	}
	if err := s.startDebug(); err != nil {
		s.Stop()
		return err
	}
	return nil
}

// Instrument records the service's metrics on a's registry; call it
// before Start.
func (s *Service) Instrument(a *admin.Server) {
	s.metrics = a.Metrics()
}

// Ready reports whether the replica serves: started and the state of its
// leases known. What a lease's term fills does not count, as a Kubernetes
// controller is ready before its informers sync: the status folder's
// mirrors (a term holds back its work until they are full; "folding
// statuses" in the log says when, with the time they took) and a member
// cluster's informer caches (a cluster that is down never syncs, the
// replica still serves every other, and the folder already holds back
// the workloads of a cluster whose term has not synced).
func (s *Service) Ready(ctx context.Context) error {
	names := []string{LeaseStatus}
	for _, name := range slices.Sorted(maps.Keys(s.clusters)) {
		names = append(names, ClusterLease(name))
	}
	return admin.LeaseKnown(s.bus, names...)(ctx)
}

// open opens the buckets, the elector and the event publisher.
func (s *Service) open(ctx context.Context) error {
	for _, kv := range []struct {
		dst  *jetstream.KeyValue
		name string
	}{
		{&s.status, bus.BucketStatus}, {&s.clusterKV, bus.BucketClusters},
		{&s.observations, bus.BucketObservations}, {&s.workloadKV, bus.BucketWorkloads},
	} {
		var err error
		if *kv.dst, err = s.bus.KV(ctx, kv.name); err != nil {
			return fmt.Errorf("aggregator: %w", err)
		}
	}
	o := s.leaseOpts
	o.Logger = s.log
	var err error
	if s.elector, err = s.bus.Elector(ctx, s.holder, o, s.log, s.metrics); err != nil {
		return fmt.Errorf("aggregator: %w", err)
	}
	s.pub = events.NewPublisher(s.bus, s.log, s.eventOpts)
	return nil
}

// Stop ends the endpoints, then every term this replica leads, releasing
// its leases for a standby to take at once, and closes its connections
// to the member clusters.
func (s *Service) Stop() {
	s.stopDebug()
	s.stopOps()
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
	s.foldMirrors.stop()
	for _, c := range s.clusters {
		c.conn.Close()
	}
}

// Holder is this replica's lease holder id.
func (s *Service) Holder() string { return s.holder }

// HeldLeases lists the leases this replica holds now.
func (s *Service) HeldLeases() []string {
	if s.elector == nil {
		return nil
	}
	names := s.elector.HeldNames()
	slices.Sort(names)
	return names
}

// emit publishes a cluster signal; a failure is only logged (signals are
// hints: the inventory record is the state).
func (s *Service) emit(ctx context.Context, subj, id string, v any) {
	b, _ := json.Marshal(v)
	if _, err := s.bus.Publish(ctx, subj, id, b, nil); err != nil {
		s.log.Warn("publish signal", "subject", subj, "err", err)
	}
}
