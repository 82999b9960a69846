// Package scheduler is the scheduler service, the only writer of the
// placements bucket. It watches workloads and the cluster inventory and
// decides, per workload, which member clusters run which share of it.
// Decisions are sticky: a placement changes only when its workload's
// generation does or one of its clusters stops passing the health filter.
//
// Replicas. Every replica keeps memory mirrors of the workloads, placements
// and clusters buckets warm (bus.Mirror), but only the holder of the lease
// "scheduler" (libs/bus/lease) decides. Each time a replica wins the lease
// it starts a term: it rebuilds the capacity it assumes taken from the
// placements bucket as it is then (nothing is carried over from an earlier
// term, its own or another replica's), and only then starts its queues.
// The term ends when the lease is lost; a holder that cannot renew stops
// deciding before a standby can take over, and every write is a
// compare-and-set on the placement's revision besides.
//
// Assumed capacity. A cluster's inventory counts the pods running there
// when it was computed (ClusterInfo.Updated); what was placed after that
// is not in it yet. The term counts, per cluster, the pods of every
// placement decided after the cluster's inventory time as requested
// (kube-scheduler's "assume"), and drops them once a newer inventory
// arrives. The same rule rebuilds the assumption on winning the lease, so
// two terms never book the same free capacity twice. (Decision and
// inventory times come from two services' clocks; skew between their
// hosts shifts the window by as much.)
//
// Queues. New work never waits behind a replay: a term has a work queue,
// fed by changes to workloads seen after the term began, by retries and by
// what needs a decision; and a replay queue, fed with every key when the
// term starts, on each resync and when a cluster's schedulability changes.
// The replay queue's workers only check: a key whose placement still
// stands gets its event ensured (see below); any other goes to the work
// queue.
//
// Events. The scheduled (or unschedulable) event is published inside the
// reconcile with events.Publisher.Ensure, whose error fails the reconcile
// so that the queue retries it; a key whose placement was written by a
// replica that died before announcing it is announced by the next check of
// that key (a new term's replay or a resync), with the same message id.
// A new term's replay ensures at once only the events of the placements
// written within Options.AnnounceWindow of the newest placement (where a
// dead replica's unannounced writes are); an older placement's events are
// ensured by the term's later queue at Options.AnnounceRate, so that the
// replay of a large region does not load the events stream ahead of new
// work. Before that queue starts, the term reads the events stream's
// headers once (settleStored): an older placement whose event is stored
// is settled there and never asked about one by one.
//
// Kinds and phases. What a kind adds to the scheduler is its kindHooks
// (how it is divided, its gate, what it does after a decision, its
// events), one file per kind (kind_<kind>.go), in one table (kinds). A
// reconcile runs in named phases, read, gate, decide, after-decide, write
// and announce, each calling the kind's hooks where it has its own.
//
// Tiers. Pools per tier and the burst buffer are the
// framework's (framework.CapacityOf); the queues hand out work Reserved
// first, then OnDemand, then Preemptible, by priority, then admission; a
// Reserved or OnDemand workload short of room preempts Preemptible work
// (PlanPreemption), bounded in rate, and its victims wait, unschedulable,
// until capacity returns.
package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/libs/events"
)

// Tunables.
const (
	// Workers reconcile workloads in parallel: they decide one at a
	// time, and wait for the bus (read, compare-and-set, event) together.
	Workers = 16
	// ReplayWorkers check replayed keys in parallel.
	ReplayWorkers = 4
	// Resync re-checks every workload this often.
	Resync = 5 * time.Minute
	// RetryUnschedulable re-tries an unplaced workload this often.
	RetryUnschedulable = 5 * time.Second
	// LeaseName is the lease a replica holds to decide.
	LeaseName = "scheduler"
)

// Service is the scheduler.
type Service struct {
	bus    *bus.Bus
	log    *slog.Logger
	events *events.Publisher
	holder string

	// Lease tunes the election (zero: the library's defaults); set it
	// before Start.
	Lease lease.Options
	// Fence is the CronJob time fence whose fire-from a move sets
	// (api.CronFenceFromEnv: the propagator's); set it before Start.
	Fence api.CronFence

	// Options configure tiers: pools, buffer, preemption; set them
	// before Start.
	Options Options
	tiers   tierState
	inv     inventoryCache

	placements, status jetstream.KeyValue
	workloadM          *bus.Mirror
	placementM         *bus.Mirror
	clusterM           *bus.Mirror
	clusterQ           *bus.Queue
	cancel             context.CancelFunc
	wg                 sync.WaitGroup
	metrics            *bus.Metrics // nil without an admin server

	// term is the current term while this replica holds the lease.
	term atomic.Pointer[term]

	// quota calls the quota service for TrainingJob gangs.
	quota *bus.Requester
	// kinds is the table of the kinds the scheduler places.
	kinds kindTable
	// decoded keeps the recently read workloads decoded, one decode per
	// change.
	decoded *workloadCache

	mu          sync.Mutex
	inventory   map[string]decodedCluster // mu must be held: by cluster name
	schedulable map[string]string         // mu must be held: last schedulability seen
}

type decodedCluster struct {
	rev uint64
	ci  *api.ClusterInfo
}

// New returns a scheduler on b.
func New(b *bus.Bus, log *slog.Logger) *Service {
	log = log.With("component", "scheduler")
	fence, err := api.CronFenceFromEnv(os.Getenv)
	if err != nil {
		log.Warn("ignoring the cronjob fence lease", "err", err)
	}
	return &Service{
		bus: b, log: log, events: events.NewPublisher(b, log, events.Options{}),
		holder:  lease.NewHolderID("scheduler"),
		decoded: newWorkloadCache(), inventory: map[string]decodedCluster{}, schedulable: map[string]string{},
		Options: OptionsFromEnv(os.Getenv, log),
		Fence:   fence,
		quota:   bus.NewRequester(b.NC, bus.RequestPolicy{Breaker: bus.BreakerPolicy{Logger: log}}),
		kinds:   kinds(),
	}
}

// Holder is this replica's name in the lease.
func (s *Service) Holder() string { return s.holder }

// Leading reports whether this replica holds the lease and decides.
func (s *Service) Leading() bool { return s.term.Load() != nil }

// Start opens the buckets and starts the mirrors; it does not wait for
// them, nor for the lease. The replica campaigns for the lease only once
// its mirrors are full (filled): ready before then, as a
// Kubernetes controller is ready before its informers sync, it never
// takes the lease from a standby that could decide at once.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.placements, err = s.bus.KV(ctx, bus.BucketPlacements); err != nil {
		return err
	}
	if s.status, err = s.bus.KV(ctx, bus.BucketStatus); err != nil {
		return err
	}
	elector, err := s.bus.Elector(ctx, s.holder, s.Lease, s.log, s.metrics)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.clusterQ = bus.NewQueue(bus.Instrumented(s.metrics, "clusters"))
	mirrors := []struct {
		dst      **bus.Mirror
		bucket   string
		onChange func(string)
	}{
		{&s.workloadM, bus.BucketWorkloads, s.workloadChanged},
		{&s.placementM, bus.BucketPlacements, nil},
		{&s.clusterM, bus.BucketClusters, s.inventoryChanged},
	}
	for _, m := range mirrors {
		if *m.dst, err = s.bus.Mirror(rctx, m.bucket, m.onChange); err != nil {
			cancel()
			return err
		}
	}
	s.wg.Go(func() { s.clusterQ.Run(rctx, 1, s.log, s.clusterChanged) })
	s.wg.Go(func() {
		if s.filled(rctx) {
			elector.Run(rctx, LeaseName, s.lead)
		}
	})
	return nil
}

// Instrument records the service's metrics on a's registry; call it
// before Start.
func (s *Service) Instrument(a *admin.Server) {
	s.metrics = a.Metrics()
}

// Ready reports whether the replica serves: started and the lease's
// state known. Its mirrors may still be filling (Start); Filled says
// when they are. It is called only once Start has returned
// (daemon.Readier), which daemon.ServiceModule answers for until then.
func (s *Service) Ready(ctx context.Context) error {
	return admin.LeaseKnown(s.bus, LeaseName)(ctx)
}

// Filled reports whether the mirrors of the workloads, placements and
// clusters are full, so that the replica campaigns for the lease.
func (s *Service) Filled() bool {
	for _, m := range s.mirrors() {
		select {
		case <-m.Ready():
		default:
			return false
		}
	}
	return true
}

// filled waits until the mirrors are full; false when ctx ended first.
func (s *Service) filled(ctx context.Context) bool {
	for _, m := range s.mirrors() {
		select {
		case <-m.Ready():
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (s *Service) mirrors() []*bus.Mirror {
	return []*bus.Mirror{s.workloadM, s.placementM, s.clusterM}
}

// Stop ends the term, if any, and releases the lease for a standby to
// take at once; decisions in flight finish.
func (s *Service) Stop() {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
	for _, m := range s.mirrors() {
		m.Stop()
	}
}

// workloadChanged drops what was decoded of a changed workload and sends
// it to the current term's work queue.
func (s *Service) workloadChanged(key string) {
	s.forgetWorkload(key)
	if t := s.term.Load(); t != nil {
		t.work.Add(key)
	}
}

// lead runs one term; it returns when ctx ends (the lease is lost or the
// service stops).
func (s *Service) lead(ctx context.Context) {
	start := time.Now()
	if !s.filled(ctx) { // they are: the replica campaigns once they are
		return
	}
	t := newTerm(s.metrics, s.sortKey)
	t.grace = s.Options.AssumeGrace
	for {
		n, err := s.rebuild(ctx, t)
		if err == nil {
			s.log.Info("term started: assumed capacity rebuilt from placements", "holder", s.holder, "placements", n)
			break
		}
		s.log.Warn("rebuild assumed capacity", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	// Publish the term before listing the keys: a workload that changes
	// from now on goes to the work queue, one that changed before is in
	// the mirror and replayed.
	s.term.Store(t)
	defer s.term.CompareAndSwap(t, nil)
	s.log.Info("leading", "holder", s.holder, "elapsed", time.Since(start).Round(time.Millisecond))

	var wg sync.WaitGroup
	// The never-placed keys are queued before the workers start, so that
	// they are decided in rank order: queued while the workers ran, the
	// best ranked of a burst submitted while no term ran could be queued
	// after workers had taken (and then decided) twenty of the worse. The
	// placed keys, whose check is no decision unless something changed,
	// are queued while the workers run: queueing 100,000 takes about a
	// second (each key's rank is decoded), which the rest need not wait
	// for.
	queued := time.Now()
	placed := s.queueUnplaced(t)
	wg.Go(func() {
		s.replayPlaced(t, placed)
		s.log.Info("term's keys queued", "holder", s.holder, "work", t.work.Len(), "replay", t.replay.Len(), "elapsed", time.Since(queued).Round(time.Millisecond))
	})
	wg.Go(func() { s.workloadM.Resync(ctx, Resync, t.replay, nil) })
	wg.Go(func() { s.placementM.Resync(ctx, Resync, t.replay, nil) })
	wg.Go(func() {
		t.replay.Run(ctx, ReplayWorkers, s.log, func(ctx context.Context, key string) error { return s.check(ctx, t, key, true) })
	})
	wg.Go(func() {
		s.settleStored(ctx, t)
		limit := rate.NewLimiter(rate.Limit(s.Options.announceRate()), 1)
		limit.Allow() // no burst at the start: the replay's own checks come first
		t.later.Run(ctx, 1, s.log, func(ctx context.Context, key string) error {
			if err := limit.Wait(ctx); err != nil {
				return err
			}
			return s.check(ctx, t, key, false)
		})
	})
	t.work.Run(ctx, Workers, s.log, func(ctx context.Context, key string) error { return s.reconcile(ctx, t, key) })
	wg.Wait()
}

// settleStored reads the events stream once (events.ReadStored) and
// counts as announced by this term every placement whose scheduling event
// is stored for its current revision or a later one: the announce of a
// placement publishes its kind's events first and its scheduled (or
// unschedulable) event last, so that event stored means every one is.
// What it does not settle, the later queue ensures one by one, as it does
// everything when the read fails.
func (s *Service) settleStored(ctx context.Context, t *term) {
	start := time.Now()
	settled := 0
	read, err := events.ReadStored(ctx, s.bus, func(key, event string, rev uint64) {
		if event != api.EventScheduled && event != api.EventUnschedulable {
			return
		}
		if pe, ok := s.placementM.Get(key); ok && rev >= pe.Revision && t.announcedAt(key) < pe.Revision {
			t.announced(key, pe.Revision)
			settled++
		}
	})
	if err != nil {
		s.log.Warn("read the events stream: older placements are ensured one by one", "err", err, "read", read)
		return
	}
	s.log.Info("read the events stream", "events", read, "settled", settled, "took", time.Since(start).Round(time.Millisecond))
}

// rebuild reads the placements bucket as it is now (a watch's initial
// values, not the mirror, which may lag) and assumes each placement's
// pods on its clusters; it sets the term's announce window from the
// placements' write times (recentFrom). It returns how many placements it
// read.
func (s *Service) rebuild(ctx context.Context, t *term) (int, error) {
	release, err := s.bus.LoadSlot(ctx) // a replay of every placement (bus.LoadSlot)
	if err != nil {
		return 0, err
	}
	defer release()
	w, err := s.placements.WatchAll(ctx)
	if err != nil {
		return 0, fmt.Errorf("watch placements: %w", err)
	}
	defer func() { _ = w.Stop() }()
	n := 0
	var written []stamp
	for {
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return n, errors.New("placements watch closed")
			}
			if e == nil {
				t.recentFrom = recentFrom(written, s.Options.announceWindow())
				return n, nil
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			written = append(written, stamp{e.Revision(), e.Created()})
			var d api.PlacementDecision
			if json.Unmarshal(e.Value(), &d) != nil || len(d.Shards) == 0 {
				continue
			}
			wl, ok, err := s.workload(e.Key())
			if !ok || err != nil {
				continue // deleted (its placement goes) or undecodable
			}
			t.assume(e.Key(), wl, &d)
			n++
		}
	}
}

// stamp is when a placement revision was written.
type stamp struct {
	rev uint64
	at  time.Time
}

// recentFrom is the first revision written within window of the newest
// write (0 when there is none): the placements a replica that died may
// have written and not announced, measured from the last write rather
// than from now, so that a scheduler that was down for longer than the
// window still announces at once what it wrote last.
func recentFrom(written []stamp, window time.Duration) uint64 {
	if len(written) == 0 {
		return 0
	}
	newest := written[0].at
	for _, w := range written {
		if w.at.After(newest) {
			newest = w.at
		}
	}
	from := uint64(0)
	for _, w := range written {
		if !w.at.Before(newest.Add(-window)) && (from == 0 || w.rev < from) {
			from = w.rev
		}
	}
	return from
}

// requeueAll sends the workloads that were never placed to the work queue
// and every other workload and placement key to the replay queue. Both
// queues hand keys out by tier, priority and admission (sortKey), so in
// the replay a workload submitted while no term ran would come after
// every older one of its tier: at 100,000 workloads that kept the App
// submitted during a scheduler's restart waiting for most of the replay
// (README "Recovery at 100,000 workloads"); now it is decided as soon as
// the term starts.
//
// The never-placed workloads are queued first, in a pass of map lookups
// only: queueing a key decodes its rank, and at 100,000 workloads on a
// loaded machine queueing every key took 5.7 s, so a never-placed key
// queued in the same pass waited for its turn in the listing (the App
// submitted just before a scheduler kill was scheduled 6.8 s after its
// submission, most of it here).
func (s *Service) requeueAll(t *term) {
	s.replayPlaced(t, s.queueUnplaced(t))
}

// queueUnplaced sends the workloads never placed to t's work queue and
// returns the others' keys (requeueAll).
func (s *Service) queueUnplaced(t *term) (placed []string) {
	keys := s.workloadM.Keys()
	placed = make([]string, 0, len(keys))
	for _, k := range keys {
		if _, ok := s.placementM.Get(k); ok {
			placed = append(placed, k)
			continue
		}
		// Never placed: submitted while no term ran (or while the last
		// one failed to write). It needs a decision, which check would
		// send it to work for; it goes there at once rather than after
		// the tier's older keys in the replay.
		t.work.Add(k)
	}
	return placed
}

// replayPlaced sends placed and every placement key to t's replay queue
// (requeueAll).
func (s *Service) replayPlaced(t *term, placed []string) {
	for _, k := range placed {
		t.replay.Add(k)
	}
	for _, k := range s.placementM.Keys() {
		t.replay.Add(k) // a placement whose workload is gone is deleted
	}
}

// clusterChanged notes a cluster's new inventory and replays every
// workload when its schedulability changed (health, cordon, taints,
// labels).
func (s *Service) clusterChanged(_ context.Context, name string) error {
	ci := s.cluster(name)
	sched := ""
	if ci != nil {
		sched = schedulability(ci)
	}
	s.mu.Lock()
	old, had := s.schedulable[name]
	if ci != nil {
		s.schedulable[name] = sched
	} else {
		delete(s.schedulable, name)
	}
	s.mu.Unlock()
	if had == (ci != nil) && old == sched {
		return nil
	}
	s.log.Info("cluster schedulability changed", "cluster", name)
	if t := s.term.Load(); t != nil {
		s.requeueAll(t)
	}
	return nil
}

func schedulability(c *api.ClusterInfo) string {
	b, _ := json.Marshal([]any{c.Healthy, c.Cordoned, c.Taints, c.Labels, c.Zone})
	return string(b)
}

// cluster returns the decoded inventory of one cluster from the mirror,
// or nil when there is none.
func (s *Service) cluster(name string) *api.ClusterInfo {
	e, ok := s.clusterM.Get(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		delete(s.inventory, name)
		return nil
	}
	if c, ok := s.inventory[name]; ok && c.rev == e.Revision {
		return c.ci
	}
	var ci api.ClusterInfo
	if err := json.Unmarshal(e.Value, &ci); err != nil {
		s.log.Error("undecodable cluster inventory", "cluster", name, "err", err)
		return nil
	}
	s.inventory[name] = decodedCluster{rev: e.Revision, ci: &ci}
	return &ci
}

// assumedPool and assumedReservedPool name the synthetic pools that carry
// assumed usage of the shared and the Reserved pools.
const (
	assumedPool         = "(assumed)"
	assumedReservedPool = "(assumed Reserved)"
)

// Snapshot returns the known clusters sorted by name, with what the
// current term placed on them since their inventory was computed counted
// as requested.
func (s *Service) Snapshot() []*api.ClusterInfo { return s.snapshot(s.term.Load()) }

func (s *Service) snapshot(t *term) []*api.ClusterInfo {
	if s.clusterM == nil {
		return nil
	}
	base := s.inventoryList()
	if t == nil {
		return slices.Clone(base)
	}
	return t.overlay(base)
}
