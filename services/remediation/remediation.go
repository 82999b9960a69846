// Package remediation is the remediation service: it turns node health
// signals into actions — cordon, drain, replace — with rate limits,
// storm breakers and the disruption ledger it shares with the upgrade
// service (libs/disruption).
//
// # Leases and state
//
// A lease per member cluster ("remediation.<cluster>", libs/bus/lease)
// splits the clusters between replicas. A term of a cluster's lease runs
// an informer on its nodes and probes its API server every second; while
// the probe fails or the informer has not synced, the cluster is
// unreachable and nothing at all is decided for its nodes (an
// unreachable API server is never read as "all nodes unhealthy"), and
// when it is reachable again the unhealthy clock of every node restarts
// from that moment (Observation.WatchSince).
//
// What the service does to each node is a NodeState, keyed by the node's
// UID, in the remediation bucket (key n.<cluster>.<uid>), written by the
// lease holder only. A term loads every state of its cluster first, so a
// standby resumes a drain or a replacement where the dead holder left it:
// evicted pods are recorded and not evicted again, and a replacement's
// name is derived from the node's UID and the attempt and written before
// the provider is called, so a second call finds the node the first made.
//
// # Escalation
//
// Step (machine.go) is a pure state machine, table-tested with a fake
// clock: a configured condition (Ready False or Unknown by default) held
// for its duration, timed from when this service first saw it (never
// lastTransitionTime, which KWOK rewrites), starts an escalation: cordon,
// wait DrainAfter, drain (Eviction API, one pass at a time with a
// doubling backoff while budgets refuse, DaemonSet and mirror pods
// skipped; past DrainDeadline the pool's DrainPolicy stops and marks the
// node as needing a human, the blocking PodDisruptionBudget named, or
// forces), then replace through the node provider, retried a bounded
// number of times if the replacement never becomes Ready. A node that
// recovers before it is replaced stops the escalation (uncordoned if this
// service cordoned it); a node whose health changed FlapTransitions times
// within FlapWindow is flapping and never acted on while it lasts.
//
// # Safeguards
//
// Starting an escalation passes four gates, in order: no pause (region or
// cluster, keys pause.*), no open storm breaker for the node's pool,
// cluster or zone (breaker.go: open while more nodes are unhealthy than
// MaxUnhealthy allows, percentages rounded down and never below one,
// closed Cooldown after the domain is back within it; escalations already
// running go on), a token from the cluster's bucket (golang.org/x/time/
// rate), and a lease on the node in the disruption ledger within the
// pool's and cluster's budget. A node a human cordoned is never touched.
//
// # Events and status
//
// Each state change appends to the node's history and is published on
// bus.NodeSubject(cluster, node, event) after the state is written, with
// idempotency key <cluster>.<uid>@<seq>; a new term re-publishes what the
// stream does not hold yet. The key s.<cluster> holds the cluster's view
// (reachable, paused, breakers); the endpoints remediation.status, .pause
// and .resume (callers: the gateway) read and change them.
package remediation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/libs/disruption"
)

// Owner is this service's name in the disruption ledger.
const Owner = "remediation"

// Tunables.
const (
	// Tick is how often each held cluster's nodes are reconciled.
	Tick = time.Second
	// ProbeEvery is how often each held cluster's API server is probed.
	ProbeEvery = time.Second
	// ProbeTimeout bounds a probe.
	ProbeTimeout = 2 * time.Second
)

// ClusterLease names the lease of a member cluster.
func ClusterLease(cluster string) string { return "remediation." + cluster }

// Service is one remediation replica.
type Service struct {
	bus      *bus.Bus
	log      *slog.Logger
	clusters map[string]*cluster
	holder   string

	kv      jetstream.KeyValue
	ledger  *disruption.Ledger
	elector *lease.Elector
	ops     *bus.Endpoints
	metrics *bus.Metrics
	own     *metrics // the service's own series; nil without an admin server

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a remediation replica for the member clusters.
func New(b *bus.Bus, log *slog.Logger, members clusters.Members) (*Service, error) {
	s := &Service{bus: b, log: log.With("component", "remediation"), clusters: map[string]*cluster{},
		holder: lease.NewHolderID("remediation")}
	for _, m := range members {
		c, err := newCluster(s, m)
		if err != nil {
			return nil, err
		}
		s.clusters[m.Name] = c
	}
	return s, nil
}

// Instrument records the service's metrics on a's registry; call it
// before Start.
func (s *Service) Instrument(a *admin.Server) {
	s.metrics = a.Metrics()
	s.own = newMetrics(a.Registerer())
}

// Start opens the buckets, campaigns for every cluster's lease and
// serves the status, pause and resume endpoints.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.kv, err = s.bus.KV(ctx, bus.BucketRemediation); err != nil {
		return fmt.Errorf("remediation: %w", err)
	}
	if s.ledger, err = disruption.OpenLedger(ctx, s.bus); err != nil {
		return fmt.Errorf("remediation: %w", err)
	}
	if s.elector, err = s.bus.Elector(ctx, s.holder, lease.Options{Logger: s.log}, s.log, s.metrics); err != nil {
		return fmt.Errorf("remediation: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, name := range slices.Sorted(maps.Keys(s.clusters)) {
		c := s.clusters[name]
		s.wg.Go(func() { s.elector.RunShared(rctx, bus.UserRemediation, ClusterLease(name), c.lead) })
	}
	if err := s.startOps(rctx); err != nil {
		s.Stop()
		return err
	}
	return nil
}

// Stop ends the endpoints and every term, releasing the leases, and
// closes its connections to the member clusters.
func (s *Service) Stop() {
	if s.ops != nil {
		if err := s.ops.Stop(); err != nil {
			s.log.Warn("stop endpoints", "err", err)
		}
		s.ops = nil
	}
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
	for _, c := range s.clusters {
		c.conn.Close()
	}
}

// Ready reports whether the replica has started and knows its leases.
func (s *Service) Ready(ctx context.Context) error {
	var names []string
	for _, name := range slices.Sorted(maps.Keys(s.clusters)) {
		names = append(names, ClusterLease(name))
	}
	return admin.LeaseKnown(s.bus, names...)(ctx)
}

// Holder is this replica's lease holder id.
func (s *Service) Holder() string { return s.holder }

// policy reads the stored policy, defaulted; a bad one is logged and the
// default used.
func (s *Service) policy(ctx context.Context) (Policy, error) {
	p := Policy{}
	e, err := s.kv.Get(ctx, KeyPolicy)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return Policy{}, fmt.Errorf("read policy: %w", err)
	default:
		if err := decodeStrict(e.Value(), &p); err != nil {
			s.log.Error("stored policy unreadable; using the default", "err", err)
			p = Policy{}
		}
	}
	p.Default()
	if err := p.Validate(); err != nil {
		s.log.Error("stored policy invalid; using the default", "err", err)
		p = DefaultPolicy()
	}
	return p, nil
}

// paused returns why new actions in cluster are paused, "" when not.
func (s *Service) paused(ctx context.Context, cluster string) (string, error) {
	for _, k := range []string{KeyPauseRegion, PauseKey(cluster)} {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", k, err)
		}
		var p Pause
		_ = decodeStrict(e.Value(), &p)
		scope := "cluster"
		if k == KeyPauseRegion {
			scope = "region"
		}
		why := "paused (" + scope + ")"
		if p.Reason != "" {
			why += ": " + p.Reason
		}
		return why, nil
	}
	return "", nil
}
