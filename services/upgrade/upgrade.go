// Package upgrade is the upgrade service: it rotates the member clusters'
// nodes to a new version label, plan by plan, in waves, through the
// disruption ledger it shares with the remediation service
// (libs/disruption). The decisions are the pure package plan; this
// package does the I/O around them.
//
// # Plans, progress, control
//
// Bucket bus.BucketUpgrade holds, per plan, its Spec (key plan.<name>,
// written by platform admins), the operator's Control (ctl.<name>: pause,
// resume, abort) and the Progress (p.<name>, written by this service
// only). A pause, resume or abort is a write of ctl.<name>, so one given
// while the service is down is read by the next term before it does
// anything.
//
// # Lease and terms
//
// One lease, "upgrade" (libs/bus/lease), makes one replica the leader. A
// term ticks every Tick: for each plan it reads spec, control and
// progress, reads the current cluster's nodes (from its cache) and the
// SLO gate, runs plan.Advance, takes ledger leases for the nodes that
// start, in one ledger write (a node remediation holds, or one the shared
// budget refuses, stays pending and is retried), then runs plan.Step for
// each node of the plan. What the steps return is written (compare-and-set
// on the revision this term read, so a deposed leader cannot overwrite its
// successor) BEFORE any side effect it names is performed; each side
// effect is idempotent given that record (see package plan), so a standby
// resumes exactly.
//
// # Cost of a tick
//
// A tick reads the current cluster's nodes and Pending pods from
// informers every replica keeps (cache.go: slimmed nodes, and only the
// pods the API server reports Pending), and asks the API server once
// whether it is ready; a node rotated and released this term is not
// observed again, and a drain's emptiness check lists only the draining
// node's pods. What a tick asks of the API server thus follows the nodes
// in flight, not the cluster's size: listing 3,000 nodes every tick cost
// the upgrade service and the member API server more than the rotation
// itself (BenchmarkFleetScale, services/atoll/e2e/bench).
//
// # SLO gate
//
// The gate of the current cluster breaches when its API server does not
// answer (never read as healthy or as "all nodes down"), when an App's
// shard there has fewer ready replicas than its availability budget
// allows (bucket status, budget from bucket workloads) — while a wave
// soaks, below its desired count: the workloads a wave displaced must be
// back in full — or when pods made since the plan's first drain there
// have been Pending for longer than PendingGrace (older pending pods are
// not the rotation's). A breach must last GateGrace (status lags the clusters);
// while it is being confirmed nothing new starts and no soak ends. Then it
// pauses the plan (plan.PausedBy gate) and, with rollback uncordon,
// uncordons the in-flight nodes whose drain has not finished; later
// clusters are not touched until an operator resumes.
//
// # Events
//
// plan.Events are published on atoll.cluster.<cluster>.<event>
// (bus.ClusterSubject) after the progress that caused them is stored,
// with the idempotency key <plan>@<seq>.
package upgrade

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/kubernetes"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/libs/disruption"
)

// Owner is this service's name in the disruption ledger.
const Owner = "upgrade"

// LeaseName is the service's lease.
const LeaseName = "upgrade"

// Tunables.
const (
	// Tick is how often the leader moves every plan.
	Tick = time.Second
	// LeaseTTL is a node's ledger lease lifetime, renewed every tick.
	LeaseTTL = 2 * time.Minute
	// PendingGrace is how long a pod may stay Pending in the current
	// cluster before the gate breaches.
	PendingGrace = 2 * time.Minute
	// GateGrace is how long a breach of the SLO gate must last to pause
	// a plan.
	GateGrace = 10 * time.Second
	// CacheSyncWait bounds how long a new term waits for the member
	// clusters' caches (cache.go) before its first tick.
	CacheSyncWait = 30 * time.Second
)

// EnvTick is the environment variable that, set to a positive duration,
// replaces Tick: a test region, whose KWOK nodes answer at once, moves
// its plans more often than a real one needs to.
const EnvTick = "ATOLL_UPGRADE_TICK"

// SpecKey is the key of a plan's spec in bucket bus.BucketUpgrade.
func SpecKey(plan string) string { return "plan." + plan }

// ControlKey is the key of a plan's operator control (pause, resume, abort) in
// bucket bus.BucketUpgrade.
func ControlKey(plan string) string { return "ctl." + plan }

// ProgressKey is the key of a plan's progress in bucket bus.BucketUpgrade.
func ProgressKey(plan string) string { return "p." + plan }

// Service is one upgrade replica.
type Service struct {
	bus      *bus.Bus
	log      *slog.Logger
	holder   string
	clusters map[string]*member

	kv      jetstream.KeyValue
	ledger  *disruption.Ledger
	elector *lease.Elector
	metrics *bus.Metrics

	tick        time.Duration        // Tick, or EnvTick's
	breachSince map[string]time.Time // by plan; the lead goroutine's only
	released    map[string]bool      // node UIDs whose ledger lease this term released
	gv          *gateView            // the gate's view while a plan is active (gateview.go); the lead goroutine's only

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// member is a member cluster's client and node provider.
type member struct {
	name     string
	conn     *clusters.Conn // cs's transport and connections, closed on Stop
	cs       kubernetes.Interface
	provider disruption.Provider
	caches   *memberCaches // its nodes and Pending pods (cache.go)
}

// New returns an upgrade replica for the member clusters.
func New(b *bus.Bus, log *slog.Logger, members clusters.Members) (*Service, error) {
	s := &Service{bus: b, log: log.With("component", "upgrade"), holder: lease.NewHolderID("upgrade"),
		clusters: map[string]*member{}, breachSince: map[string]time.Time{}, tick: Tick}
	if v := os.Getenv(EnvTick); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			s.tick = d
		} else {
			s.log.Warn("ignoring a tick that is not a positive duration", "env", EnvTick, "value", v)
		}
	}
	for _, m := range members {
		cfg, err := m.RESTConfig()
		if err != nil {
			return nil, err
		}
		conn, err := clusters.Connect(cfg)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
		}
		cs, err := kubernetes.NewForConfigAndClient(cfg, conn.HTTP)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
		}
		caches, err := newMemberCaches(cfg, conn)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
		}
		s.clusters[m.Name] = &member{name: m.Name, conn: conn, cs: cs, provider: &disruption.KWOK{Client: cs}, caches: caches}
	}
	return s, nil
}

// Instrument records the service's metrics on a's registry; call it
// before Start.
func (s *Service) Instrument(a *admin.Server) { s.metrics = a.Metrics() }

// Start opens the buckets and campaigns for the lease.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.kv, err = s.bus.KV(ctx, bus.BucketUpgrade); err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	if s.ledger, err = disruption.OpenLedger(ctx, s.bus); err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	if s.elector, err = s.bus.Elector(ctx, s.holder, lease.Options{Logger: s.log}, s.log, s.metrics); err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, m := range s.clusters {
		m.caches.run(rctx, &s.wg)
	}
	s.wg.Go(func() { s.elector.Run(rctx, LeaseName, s.lead) })
	return nil
}

// Stop ends the term, releasing the lease, and closes its connections to
// the member clusters.
func (s *Service) Stop() {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
	for _, m := range s.clusters {
		m.conn.Close()
	}
}

// Ready reports whether the replica has started and knows its lease.
func (s *Service) Ready(ctx context.Context) error {
	return admin.LeaseKnown(s.bus, LeaseName)(ctx)
}

// Holder is this replica's lease holder id.
func (s *Service) Holder() string { return s.holder }

// lead runs one term of the lease.
func (s *Service) lead(ctx context.Context) {
	s.log.Info("leading upgrades")
	s.released = map[string]bool{} // a new term releases again (idempotent)
	defer s.stopView()
	// A cluster whose caches are not synced by then reads as unreachable
	// (the gate holds, then pauses).
	if !s.waitSynced(ctx, CacheSyncWait) && ctx.Err() == nil {
		s.log.Warn("leading before every member cluster's nodes were listed", "waited", CacheSyncWait)
	}
	// The plans' specs, mirrored for the term: a tick reads them from
	// memory instead of listing the bucket (a consumer created and deleted
	// on the server every tick, plan or not). A spec written wakes the loop.
	changed := make(chan struct{}, 1)
	var plans *bus.Mirror
	for delay := 100 * time.Millisecond; plans == nil; delay = min(2*delay, 5*time.Second) {
		var err error
		plans, err = s.bus.MirrorFiltered(ctx, bus.BucketUpgrade, SpecKey("*"), func(string) {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
		if err == nil {
			break
		}
		s.log.Warn("mirror plans", "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
	defer plans.Stop()
	select {
	case <-ctx.Done():
		return
	case <-plans.Ready():
	}
	tick := time.NewTicker(s.tick)
	defer tick.Stop()
	for {
		if err := s.reconcile(ctx, plans); err != nil && ctx.Err() == nil {
			s.log.Warn("reconcile plans", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-changed:
		}
	}
}

// reconcile moves every plan in plans (the specs' mirror) once.
func (s *Service) reconcile(ctx context.Context, plans *bus.Mirror) error {
	var names []string
	revs := map[string]uint64{}
	for _, k := range plans.Keys() {
		name := strings.TrimPrefix(k, "plan.")
		if e, ok := plans.Get(k); ok {
			names = append(names, name)
			revs[name] = e.Revision
		}
	}
	// One plan rotates at a time: the oldest unfinished one (by its
	// spec's revision); the others hold until it is done or aborted.
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(revs[a], revs[b]) })
	var errs []error
	first := ""
	for _, name := range names {
		active, err := s.move(ctx, name, first)
		if err != nil {
			errs = append(errs, fmt.Errorf("plan %s: %w", name, err))
		}
		if active && first == "" {
			first = name
		}
	}
	if first == "" {
		s.stopView()
	}
	return errors.Join(errs...)
}

// get decodes key into v; it returns the revision, 0 when absent.
func get(ctx context.Context, kv jetstream.KeyValue, key string, v any) (uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", key, err)
	}
	b, err := bus.Inflate(e.Value()) // a plan's progress is compressed once large (store)
	if err != nil {
		return 0, fmt.Errorf("decode %s: %w", key, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return 0, fmt.Errorf("decode %s: %w", key, err)
	}
	return e.Revision(), nil
}
