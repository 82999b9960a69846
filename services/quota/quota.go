// Package quota is the quota service: each project's limits per tier and
// what every workload holds, in the quota bucket (this service, in any
// number of replicas, is its only writer). The cost of a reserve or a
// release does not depend on how many workloads the project has.
//
// # Layout
//
// Two kinds of key (api.QuotaProjectKey, api.QuotaReservationKey):
//
//	p.<project>        api.Ledger: limits and usage per tier, a reservation
//	                   count, and the outcomes of the last TxnRing
//	                   transactions (about 2.5 KiB, whatever the project's size)
//	r.<project>.<key>  api.Reservation: one workload's demand, and while a
//	                   transaction on it is under way, that transaction
//
// # Denying by default
//
// A project's caps per tier are its own limit where a platform admin set
// one, resource by resource, and the region's defaults (Config, from the
// service's flags) elsewhere; none is unlimited, and 0 forbids. The
// defaults are published at api.QuotaDefaultsKey for readers (the
// gateway shows the caps in force). A new workload is refused past
// Config.Defaults.MaxWorkloads reservations (the ledger's count). A
// change is checked only on the resources it raises (api.Ledger.Check).
//
// # Transactions
//
// NATS Key-Value has compare-and-set on one key, not across two, so a
// change touches the two keys in an order that any replica can finish
// after any crash. (JetStream's atomic batch publish, server 2.12 and
// later, could write both keys at once with a per-subject expected
// revision each; it needs the bucket's stream to allow it and a batch
// helper in libs/bus, neither of which exists yet.)
//
//  1. Intent: the reservation key is written (compare-and-set) as pending
//     (demand, the demand it replaces, a fresh transaction id) or, for a
//     release, as releasing. A key whose record is already an intent is
//     first finished (step 2 and 3 for that intent), so a key has at most
//     one transaction under way.
//  2. Decision: the ledger is changed with compare-and-set (bus.Update): if
//     the transaction id is among the ledger's recorded outcomes, it was
//     decided already and that outcome stands; otherwise the limit is
//     checked and the delta applied (new minus old demand, across tiers
//     when the tier changes) or refused, and the outcome recorded. This
//     write is the transaction's single point of decision: whoever makes
//     it, the owner or a replica repairing after the owner died, a
//     transaction is applied at most once.
//  3. Finish: the reservation key becomes committed (applied), goes back to
//     what it held (refused), or is deleted (release, or a refused first
//     reserve), with compare-and-set against the intent's revision. Losing
//     that race means someone else finished it.
//
// The owner replies only after step 3. A repair sweep finishes intents
// older than IntentAge (their owner died or hangs), found through a watch
// of the bucket; it runs on the replica holding the lease SweepLease, as
// do the orphan checks below. Transactions of one project are serialized per replica by
// an in-process lock from the ledger read before step 1 to the end of step
// 2, so compare-and-set conflicts on the ledger happen only between
// replicas; correctness rests on compare-and-set alone. The lock is held
// only while the bus connection stays up: a call under it ends when the
// connection drops, as a crash at that step would (the intent is repaired
// or finished by the next operation on its key), so that a call lost in
// an outage does not hold every reserve of the project on this replica
// for its whole deadline after the bus is back; and a request waits for
// the lock only as long as its caller waits for the reply (its context
// ends with the caller's attempt, bus.HeaderTimeout), so the requests
// queued when the bus comes back are not all done for callers that have
// given up and asked again. The transactions waiting for the lock at once
// are begun together by the one that takes it (group commit, batch.go):
// one ledger read, their intents written concurrently, one ledger write
// deciding them in arrival order. A backlog of a project's creates (those
// held while admission or the bus was away) then drains in a few locked
// sections rather than one each.
//
// # Cost
//
// A reserve reads the ledger once (its Seq for the intent, and a limit
// check that writes nothing when the demand does not fit) and writes three
// times (intent, ledger, finish); reserves begun in one batch share the
// ledger's read and write. The two compare-and-sets that need a
// current value start from that read of the ledger and from the mirror's
// copy of the reservation key, so they read again only when that guess is
// stale. None of it depends on the project's size; the
// mirror and the orphan sweep, in the background, do.
//
// # The outcome ring and its size
//
// A ledger keeps only the last TxnRing outcomes. A transaction id missing
// from them means "not decided yet" only if no outcome recorded since the
// intent was written has been dropped, so every intent carries the
// ledger's transaction count (Seq) read just before it was written, and a
// decision checks Seq - len(Txns) <= that count. If the check fails (the
// ring moved on by more than TxnRing decisions while the intent waited),
// the outcome cannot be known from the ledger, and the project is
// recounted from its reservation keys in one compare-and-set that also
// records every such intent as refused (releases as applied): correct, but
// it reads every reservation of the project and fails the owner's request
// with ErrAborted. An intent refused that way may have been decided
// applied by an owner that then stalled (a partition) for more than
// TxnRing decisions, so the recount first marks it aborted on its key
// (compare-and-set): the owner's finish then loses, reads the key back
// (confirm) and reports ErrAborted instead of a reserve the ledger no
// longer counts. TxnRing therefore bounds how long an intent may wait at
// a given decision rate before that slow path is taken, never
// correctness. The owner decides in the same locked section as its read,
// so only other replicas' decisions during that section (a read and two
// writes, well under a millisecond) and those of the batch before it (at
// most maxBatch, 64) count; an intent whose owner died is
// finished by a later operation on the same key at once, or by the repair
// sweep within IntentAge + RepairEvery (0.75 s) plus the watch's delay.
// 128 outcomes cover that window up to about 170 decisions per second in
// one project, above the heaviest load measured on the platform (8,000
// submissions a minute, 133 per second, for the whole region), at about 17
// bytes each.
//
// # Orphans
//
// A committed reservation older than OrphanAge whose workload key is
// missing from the workloads bucket is released (admission died between
// reserving and writing the workload, or between deleting and releasing).
//
// # Migration
//
// At start, ledgers of the previous layout (one key per project holding
// every reservation) are split into this one before requests are served.
package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
	"atoll.dev/libs/daemon/admin"
)

const (
	// OrphanAge is how long a reservation may exist without its workload
	// before it is returned (admission reserves before it writes the workload).
	OrphanAge = 30 * time.Second
	// FullSweepEvery is how often every reservation is checked against the
	// workloads bucket. Between full sweeps each reservation is checked
	// once, OrphanAge after it was committed (a workload admission never
	// wrote); a full sweep also finds a workload deleted without its
	// release (admission died in between). Its checks are spread over the
	// period, at most bus.ResyncRate a second on average: a sweep of more
	// reservations takes longer (sweepLoop).
	FullSweepEvery = 10 * time.Minute
	// TxnRing is how many transaction outcomes a ledger keeps (see the
	// package comment for the size).
	TxnRing = 128
	// IntentAge is how long an intent may wait for its owner before the
	// repair sweep finishes it.
	IntentAge = 500 * time.Millisecond
	// RepairEvery is the period of the repair sweep.
	RepairEvery = 250 * time.Millisecond
	// SweepLease is the lease, in bus.BucketLeases, of the replica that
	// runs the repair and orphan sweeps (see Service.sweep).
	SweepLease = "quota-sweeps"
)

// Service serves quota requests.
type Service struct {
	bus *bus.Bus
	log *slog.Logger
	// defaults are the region's quota policy (Config.Defaults).
	defaults api.QuotaDefaults

	kv        jetstream.KeyValue // the quota bucket
	mirror    *bus.Mirror        // the quota bucket, for the repair and orphan sweeps
	mirrorSet chan struct{}      // closed once mirror is set: its callback may run before
	endpoints *bus.Endpoints
	metrics   *bus.Metrics // nil without an admin server
	cancel    context.CancelFunc
	loops     sync.WaitGroup

	// holder is this replica's id in SweepLease's record.
	holder string
	// intentAge and orphanAge are IntentAge and OrphanAge (tests change them).
	intentAge, orphanAge time.Duration
	// recounts counts the projects this replica recounted (see recount).
	recounts atomic.Int64
	// batches counts the locked sections that began transactions
	// (batch.go), for tests and metrics.
	batches atomic.Int64
	// fail, when set (tests), is called after each step of a transaction
	// ("intent", "decided"); an error stops the transaction there, as a
	// crash would.
	fail func(step string) error

	mu      sync.Mutex
	locks   map[string]chan struct{} // mu must be held; one per project (a send takes it), held from a transaction's ledger read to its decision
	intents map[string]time.Time     // mu must be held; reservation keys holding an intent, and when it was first seen
	// approving holds the keys of the quota requests being approved
	// (observe): the approval repair reads these, not every key of the
	// bucket (it runs 4 times a second; at 100,000 workloads, going
	// over every reservation's key for the few requests cost 1.5% of a
	// core with nothing submitted).
	approving map[string]struct{}  // mu must be held
	orphans   map[string]time.Time // mu must be held; committed reservation keys to check once for a missing workload, and when
	ledgers   map[string]known     // mu must be held; each project's ledger as last read or written here
	waiting   map[string][]*job    // mu must be held; each project's transactions waiting to be begun (batch.go)
}

// known is a key's value as last seen, which may since have changed; rev
// 0 means it did not exist.
type known struct {
	value []byte
	rev   uint64
}

// New returns a quota service on b; cfg nil means DefaultConfig.
func New(b *bus.Bus, log *slog.Logger, cfg *Config) *Service {
	if cfg == nil {
		cfg = DefaultConfig()
	}
	return &Service{bus: b, log: log.With("component", "quota"), defaults: cfg.Defaults, holder: lease.NewHolderID("quota"), intentAge: IntentAge, orphanAge: OrphanAge,
		locks: map[string]chan struct{}{}, intents: map[string]time.Time{}, approving: map[string]struct{}{}, orphans: map[string]time.Time{}, ledgers: map[string]known{}, waiting: map[string][]*job{}}
}

// Start opens the buckets, registers the endpoints and starts the repair
// and orphan sweeps.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.kv, err = s.bus.KV(ctx, bus.BucketQuota); err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if err := s.publishDefaults(ctx); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.mirrorSet = make(chan struct{})
	s.mirror, err = s.bus.Mirror(rctx, bus.BucketQuota, s.observe)
	close(s.mirrorSet)
	if err != nil {
		cancel()
		return fmt.Errorf("mirror quota: %w", err)
	}
	s.endpoints, err = s.bus.Serve(rctx, bus.ServeConfig{Name: bus.UserQuota, Version: "0.2.0", Description: "project quota per tier", Metrics: s.metrics, Logger: s.log},
		// Admission reserves and releases, and so does the scheduler for a
		// TrainingJob's gang taken down and requeued (services/scheduler
		// training.go); the gateway reads and sets the limits for the
		// users it has authorised (bus.Bus.OnlyFrom): each descriptor
		// names its callers.
		bus.QuotaReserve.Endpoint(RequestTimeout, s.handleReserve),
		bus.QuotaRelease.Endpoint(RequestTimeout, s.handleRelease),
		bus.QuotaGet.Endpoint(RequestTimeout, s.handleGet),
		bus.QuotaSet.Endpoint(RequestTimeout, s.handleSet),
		bus.QuotaRequestCreate.Endpoint(RequestTimeout, s.handleRequestCreate),
		bus.QuotaRequestList.Endpoint(RequestTimeout, s.handleRequestList),
		bus.QuotaRequestDecide.Endpoint(RequestTimeout, s.handleRequestDecide),
		bus.QuotaForget.Endpoint(RequestTimeout, s.handleForget), // forget.go
	)
	if err != nil {
		cancel()
		return err
	}
	el, err := s.bus.Elector(rctx, s.holder, lease.Options{}, s.log, s.metrics)
	if err != nil {
		cancel()
		_ = s.endpoints.Stop()
		s.endpoints = nil
		return fmt.Errorf("quota sweep lease: %w", err)
	}
	s.loops.Go(func() { el.Run(rctx, SweepLease, s.sweep) })
	// A standby notes new reservations as the holder does, and drops them
	// once due (the holder checks them), so that its notes stay as many as
	// one OrphanAge of reservations, and a takeover starts with those only.
	s.loops.Go(func() {
		s.every(rctx, s.orphanAge/3, "orphan notes", func(context.Context) error {
			if !el.Held(SweepLease) {
				s.dropDueOrphans(time.Now())
			}
			return nil
		})
	})
	return nil
}

// dropDueOrphans forgets the reservations noted for an orphan check due by now.
func (s *Service) dropDueOrphans(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, at := range s.orphans {
		if !at.After(now) {
			delete(s.orphans, k)
		}
	}
}

// sweep runs the repair sweep, the orphan check and the full orphan sweep
// while ctx lasts: while this replica holds SweepLease. Every replica
// watches the bucket and notes intents and new reservations (observe), so
// the replica that takes the lease over has them at hand. Each sweep is
// safe to run twice (compare-and-set decides), but running it on every
// replica would multiply its reads by their number. An intent whose owner
// died while the holder died too waits for the takeover (at most the
// lease's TTL and a poll, 7 s) unless an operation on its key finishes it
// first.
func (s *Service) sweep(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		s.every(ctx, RepairEvery, "repair sweep", func(ctx context.Context) error { return s.RepairOnce(ctx, s.intentAge) })
	})
	wg.Go(func() {
		s.every(ctx, s.orphanAge/3, "orphan check", func(ctx context.Context) error { return s.CheckOrphans(ctx) })
	})
	wg.Go(func() {
		s.every(ctx, RepairEvery, "approval repair", func(ctx context.Context) error { return s.RepairApprovals(ctx, s.intentAge) })
	})
	wg.Go(func() { s.sweepLoop(ctx) })
	wg.Wait()
}

// Holder is this replica's id in the record of the lease it holds.
func (s *Service) Holder() string { return s.holder }

// Stop unregisters the endpoints and ends the sweeps.
func (s *Service) Stop() error {
	if s.cancel != nil {
		s.cancel()
		s.loops.Wait()
		s.mirror.Stop()
	}
	if s.endpoints != nil {
		return s.endpoints.Stop()
	}
	return nil
}

func (s *Service) every(ctx context.Context, period time.Duration, what string, fn func(context.Context) error) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn(what, "err", err)
			}
		}
	}
}

// lock takes project's lock, waiting no longer than ctx allows (a
// request's context ends when its caller gives up: a reserve queued
// behind others is dropped rather than done for no one), and returns the
// context to work under while it is held and the function that releases
// it. That context also ends when the bus connection drops
// (bus.UntilDisconnected): a Key-Value call in flight then is lost with
// the connection, and would otherwise keep the lock, and every request of
// the project queued behind it, until its deadline long after the bus is
// back.
func (s *Service) lock(ctx context.Context, project string) (context.Context, func(), error) {
	l := s.lockOf(project)
	select {
	case l <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("wait for project %s: %w", project, ctx.Err())
	}
	ctx, cancel := s.bus.UntilDisconnected(ctx)
	return ctx, func() {
		cancel()
		<-l
	}, nil
}

// publishDefaults writes the region's defaults at api.QuotaDefaultsKey
// for readers, unless the key holds them already.
func (s *Service) publishDefaults(ctx context.Context) error {
	b, err := json.Marshal(s.defaults)
	if err != nil {
		return err
	}
	_, err = bus.Update(ctx, s.kv, api.QuotaDefaultsKey, func(cur []byte, exists bool) ([]byte, error) {
		if exists && string(cur) == string(b) {
			return nil, bus.ErrNoChange
		}
		return b, nil
	})
	if err != nil && !errors.Is(err, bus.ErrNoChange) {
		return fmt.Errorf("publish quota defaults: %w", err)
	}
	return nil
}

// Defaults are the region's quota policy this replica applies.
func (s *Service) Defaults() api.QuotaDefaults { return s.defaults }

// SetLimit sets a project's limit for one tier, replacing the tier's
// previous one; its unset resources follow the region's defaults.
func (s *Service) SetLimit(ctx context.Context, project string, tier api.Tier, lim api.Limit) error {
	ctx, unlock, err := s.lock(ctx, project)
	if err != nil {
		return fmt.Errorf("set limit %s %s: %w", project, tier, err)
	}
	defer unlock()
	err = s.writeLedger(ctx, project, func(l *api.Ledger) error {
		if old, ok := l.Limits[tier]; ok && sameLimit(old, lim) {
			return bus.ErrNoChange
		}
		l.Limits[tier] = lim
		return nil
	})
	if err != nil && !errors.Is(err, bus.ErrNoChange) {
		return fmt.Errorf("set limit %s %s: %w", project, tier, err)
	}
	return nil
}

// Ledger returns a project's limits and usage (empty if it has none),
// read from the bucket, without the outcome ring.
func (s *Service) Ledger(ctx context.Context, project string) (*api.Ledger, error) {
	l, err := s.readLedger(ctx, project)
	if err != nil {
		return nil, err
	}
	l.Txns = nil
	return l, nil
}

// readLedger reads a project's ledger from the bucket stream's leader: a
// follower's copy may be many decisions old after a partition, and an
// intent given that old Seq would look undecidable (a recount, and the
// request refused with ErrAborted) although its outcome is in the ring.
func (s *Service) readLedger(ctx context.Context, project string) (*api.Ledger, error) {
	v, rev, err := s.bus.Latest(ctx, bus.BucketQuota, api.QuotaProjectKey(project))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return decodeLedger(project, nil, false)
	case err != nil:
		return nil, fmt.Errorf("read ledger %s: %w", project, err)
	}
	s.remember(project, known{value: v, rev: rev})
	return decodeLedger(project, v, true)
}

// remember keeps k as the project's ledger unless a later one is known.
func (s *Service) remember(project string, k known) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k.rev > s.ledgers[project].rev {
		s.ledgers[project] = k
	}
}

// writeLedger changes a project's ledger with fn (which may run several
// times; returning bus.ErrNoChange writes nothing). The project's lock
// must be held.
func (s *Service) writeLedger(ctx context.Context, project string, fn func(*api.Ledger) error) error {
	s.mu.Lock()
	guess, ok := s.ledgers[project]
	s.mu.Unlock()
	var written []byte
	rev, err := s.update(ctx, api.QuotaProjectKey(project), guess, ok, func(cur []byte, exists bool) ([]byte, error) {
		l, err := decodeLedger(project, cur, exists)
		if err != nil {
			return nil, err
		}
		if err := fn(l); err != nil {
			return nil, err
		}
		written, err = json.Marshal(l)
		return written, err
	})
	if err != nil {
		return err
	}
	s.remember(project, known{value: written, rev: rev})
	return nil
}

// update is bus.Update that first applies fn to guess, a value believed
// current (this replica's last write, or the mirror's), and writes the
// result with one compare-and-set: only a wrong guess (the write loses,
// or fn declines the guessed value) pays for the read bus.Update makes.
func (s *Service) update(ctx context.Context, key string, guess known, ok bool, fn bus.Mutator) (uint64, error) {
	if ok {
		if next, err := fn(guess.value, guess.rev != 0); err == nil {
			rev, err := bus.CompareAndSet(ctx, s.kv, key, next, guess.rev)
			if !errors.Is(err, bus.ErrConflict) {
				return rev, err
			}
		}
	}
	return bus.Update(ctx, s.kv, key, fn)
}

// mirrored is a key's value as the mirror holds it, once it has loaded.
func (s *Service) mirrored(key string) (known, bool) {
	select {
	case <-s.mirror.Ready():
	default:
		return known{}, false
	}
	e, ok := s.mirror.Get(key)
	if !ok {
		return known{}, true
	}
	return known{value: e.Value, rev: e.Revision}, true
}

func decodeLedger(project string, b []byte, exists bool) (*api.Ledger, error) {
	l := &api.Ledger{Project: project}
	if exists {
		if err := json.Unmarshal(b, l); err != nil {
			return nil, fmt.Errorf("decode ledger %s: %w", project, err)
		}
	}
	if l.Limits == nil {
		l.Limits = map[api.Tier]api.Limit{}
	}
	if l.Usage == nil {
		l.Usage = map[api.Tier]api.Demand{}
	}
	return l, nil
}

// sameLimit says whether a and b set the same amounts.
func sameLimit(a, b api.Limit) bool {
	eq := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return eq(a.MilliCPU, b.MilliCPU) && eq(a.MemoryBytes, b.MemoryBytes) && eq(a.GPUs, b.GPUs) && eq(a.Pods, b.Pods) && eq(a.StorageBytes, b.StorageBytes)
}

// RequestTimeout bounds each request's work.
const RequestTimeout = 10 * time.Second

// Instrument records the service's metrics on a's registry; call it
// before Start.
func (s *Service) Instrument(a *admin.Server) { s.metrics = a.Metrics() }

func (s *Service) handleReserve(ctx context.Context, req api.QuotaReserve, _ micro.Request) (api.Ack, error) {
	err := s.Reserve(ctx, req.Project, req.Key, req.Demand)
	var rej *api.QuotaRejection
	switch {
	case errors.As(err, &rej) && rej.Resource == api.ResourceWorkloads:
		return nil, &bus.Error{Status: api.StatusUnprocessable, Body: api.ErrorBody{Code: "TooManyWorkloads", Message: rej.Error(), Quota: rej}}
	case errors.As(err, &rej):
		return nil, &bus.Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "QuotaExceeded", Message: rej.Error(), Quota: rej}}
	case errors.Is(err, ErrAborted):
		return nil, bus.Errorf(api.StatusUnavailable, "Unavailable", "%v", err)
	case err != nil:
		return nil, err
	}
	return api.Ack{"reserved": true}, nil
}

func (s *Service) handleRelease(ctx context.Context, req api.QuotaRelease, _ micro.Request) (api.Ack, error) {
	if err := s.Release(ctx, req.Project, req.Key); err != nil {
		return nil, err
	}
	return api.Ack{"released": true}, nil
}

func (s *Service) handleSet(ctx context.Context, req api.QuotaSet, _ micro.Request) (api.Ack, error) {
	if !api.IsDNSLabel(req.Project) {
		return nil, bus.Errorf(api.StatusUnprocessable, "Invalid", "project is not a DNS label")
	}
	switch req.Tier {
	case api.TierReserved, api.TierOnDemand, api.TierPreemptible:
	default:
		return nil, bus.Errorf(api.StatusUnprocessable, "Invalid", "tier %q: one of Reserved, OnDemand, Preemptible", req.Tier)
	}
	for _, v := range []*int64{req.Limit.MilliCPU, req.Limit.MemoryBytes, req.Limit.GPUs, req.Limit.Pods, req.Limit.StorageBytes} {
		if v != nil && *v < 0 {
			return nil, bus.Errorf(api.StatusUnprocessable, "Invalid", "limits must not be negative (0 forbids a resource)")
		}
	}
	if err := s.SetLimit(ctx, req.Project, req.Tier, req.Limit); err != nil {
		return nil, err
	}
	return api.Ack{"set": true}, nil
}

// handleGet replies with the project's api.Ledger: limits, usage per tier
// and the number of reservations (not the reservations themselves).
func (s *Service) handleGet(ctx context.Context, req api.QuotaRelease, _ micro.Request) (*api.Ledger, error) { // {project}
	return s.Ledger(ctx, req.Project)
}
