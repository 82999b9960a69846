// Package quota is the quota service: each project's limits per tier and
// the ledger of what every workload holds, in the quota bucket (this
// service is its only writer). Reserve and release are atomic under
// concurrency: one project's ledger is one key, changed by compare-and-set
// under a per-project lock.
package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/fx"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Module is the quota service for fx.
var Module = fx.Module("quota",
	fx.Provide(New),
	fx.Invoke(func(lc fx.Lifecycle, s *Service) { lc.Append(fx.StartStopHook(s.Start, s.Stop)) }),
)

// Endpoint verbs, at bus.RequestSubject("quota", verb).
const (
	VerbReserve = "reserve"
	VerbRelease = "release"
	VerbGet     = "get"
	VerbSet     = "set"
)

// OrphanAge is how long a reservation may exist without its workload
// before it is returned (admission reserves before it writes the workload).
const OrphanAge = 30 * time.Second

// Service serves quota requests.
type Service struct {
	bus *bus.Bus
	log *slog.Logger

	ledgers   jetstream.KeyValue
	workloads jetstream.KeyValue
	svc       micro.Service
	cancel    context.CancelFunc
	done      chan struct{}

	mu          sync.Mutex
	locks       map[string]*sync.Mutex   // mu must be held; one per project
	ledgerCache map[string]*cachedLedger // mu must be held; replaced, never mutated
}

// New returns a quota service on b.
func New(b *bus.Bus, log *slog.Logger) *Service {
	return &Service{bus: b, log: log.With("component", "quota"), locks: map[string]*sync.Mutex{}, ledgerCache: map[string]*cachedLedger{}}
}

// Start opens the buckets, registers the endpoints and starts the orphan sweep.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.ledgers, err = s.bus.KV(ctx, bus.BucketQuota); err != nil {
		return err
	}
	if s.workloads, err = s.bus.KV(ctx, bus.BucketWorkloads); err != nil {
		return err
	}
	s.svc, err = micro.AddService(s.bus.NC, micro.Config{Name: "atoll-quota", Version: "0.1.0", Description: "project quota per tier"})
	if err != nil {
		return fmt.Errorf("register quota service: %w", err)
	}
	for verb, h := range map[string]micro.HandlerFunc{
		VerbReserve: s.handleReserve, VerbRelease: s.handleRelease, VerbGet: s.handleGet, VerbSet: s.handleSet,
	} {
		if err := s.svc.AddEndpoint(verb, bus.Concurrent(64, h), micro.WithEndpointSubject(bus.RequestSubject("quota", verb))); err != nil {
			return fmt.Errorf("register quota %s: %w", verb, err)
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go s.sweepOrphans(rctx)
	return nil
}

// Stop unregisters the endpoints.
func (s *Service) Stop() error {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
	if s.svc != nil {
		return s.svc.Stop()
	}
	return nil
}

func (s *Service) lock(project string) func() {
	s.mu.Lock()
	l, ok := s.locks[project]
	if !ok {
		l = &sync.Mutex{}
		s.locks[project] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Reserve holds d for the workload key, replacing what it held before (so
// a retry, or an update, is counted exactly once). It returns a
// *api.QuotaRejection when a limit of d's tier would be exceeded.
func (s *Service) Reserve(ctx context.Context, project, key string, d api.Demand) error {
	defer s.lock(project)()
	var rejection *api.QuotaRejection
	_, err := s.update(ctx, project, func(l *api.Ledger) error {
		prev := l.Reservations[key]
		used := l.Used(d.Tier)
		if prev.Demand.Tier == d.Tier { // its own holding does not count against it
			used.MilliCPU -= prev.Demand.MilliCPU
			used.MemoryBytes -= prev.Demand.MemoryBytes
			used.GPUs -= prev.Demand.GPUs
			used.Pods -= prev.Demand.Pods
		}
		if r := l.Check(d, used); r != nil {
			rejection = r
			return bus.ErrNoChange
		}
		if prev.Demand == d {
			return bus.ErrNoChange
		}
		l.Reservations[key] = api.Reservation{Demand: d, At: time.Now().UTC()}
		return nil
	})
	if rejection != nil {
		return rejection
	}
	return err
}

// Release returns what key held; releasing what is not held is a no-op.
func (s *Service) Release(ctx context.Context, project, key string) error {
	defer s.lock(project)()
	_, err := s.update(ctx, project, func(l *api.Ledger) error {
		if _, ok := l.Reservations[key]; !ok {
			return bus.ErrNoChange
		}
		delete(l.Reservations, key)
		return nil
	})
	return err
}

// SetLimit sets a project's limit for one tier.
func (s *Service) SetLimit(ctx context.Context, project string, tier api.Tier, lim api.Limit) error {
	defer s.lock(project)()
	_, err := s.update(ctx, project, func(l *api.Ledger) error {
		l.Limits[tier] = lim
		return nil
	})
	return err
}

// Ledger returns a project's ledger (empty if it has none).
func (s *Service) Ledger(ctx context.Context, project string) (*api.Ledger, error) {
	e, err := s.ledgers.Get(ctx, project)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &api.Ledger{Project: project}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ledger %s: %w", project, err)
	}
	var l api.Ledger
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		return nil, fmt.Errorf("decode ledger %s: %w", project, err)
	}
	return &l, nil
}

// update changes a project's ledger with compare-and-set; fn returning
// bus.ErrNoChange writes nothing and is not an error. The project's lock
// must be held. The ledger is kept in memory between calls (this service
// is the bucket's only writer); a lost race, as with a second replica,
// re-reads it.
func (s *Service) update(ctx context.Context, project string, fn func(*api.Ledger) error) (uint64, error) {
	for attempt := 0; attempt < 16; attempt++ {
		c, err := s.cached(ctx, project)
		if err != nil {
			return 0, err
		}
		next := c.ledger.Clone()
		if err := fn(next); errors.Is(err, bus.ErrNoChange) {
			return c.rev, nil
		} else if err != nil {
			return 0, err
		}
		b, err := json.Marshal(next)
		if err != nil {
			return 0, err
		}
		rev, err := bus.CompareAndSet(ctx, s.ledgers, project, b, c.rev)
		if errors.Is(err, bus.ErrConflict) {
			s.forget(project)
			continue
		}
		if err != nil {
			return 0, err
		}
		s.mu.Lock()
		s.ledgerCache[project] = &cachedLedger{ledger: next, rev: rev}
		s.mu.Unlock()
		return rev, nil
	}
	return 0, fmt.Errorf("ledger %s: %w", project, bus.ErrConflict)
}

// cachedLedger is a project's ledger as last written or read.
type cachedLedger struct {
	ledger *api.Ledger
	rev    uint64
}

func (s *Service) cached(ctx context.Context, project string) (*cachedLedger, error) {
	s.mu.Lock()
	c := s.ledgerCache[project]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c = &cachedLedger{ledger: &api.Ledger{Project: project}}
	e, err := s.ledgers.Get(ctx, project)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, fmt.Errorf("read ledger %s: %w", project, err)
	default:
		if err := json.Unmarshal(e.Value(), c.ledger); err != nil {
			return nil, fmt.Errorf("decode ledger %s: %w", project, err)
		}
		c.rev = e.Revision()
	}
	s.mu.Lock()
	s.ledgerCache[project] = c
	s.mu.Unlock()
	return c, nil
}

func (s *Service) forget(project string) {
	s.mu.Lock()
	delete(s.ledgerCache, project)
	s.mu.Unlock()
}

// sweepOrphans returns reservations whose workload does not exist (admission
// died between reserving and writing, or between deleting and releasing).
func (s *Service) sweepOrphans(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(OrphanAge / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.SweepOnce(ctx, OrphanAge); err != nil && ctx.Err() == nil {
				s.log.Warn("orphan sweep", "err", err)
			}
		}
	}
}

// SweepOnce releases reservations older than age whose workload is missing.
func (s *Service) SweepOnce(ctx context.Context, age time.Duration) error {
	lister, err := s.ledgers.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil
		}
		return err
	}
	for project := range lister.Keys() {
		l, err := s.Ledger(ctx, project)
		if err != nil {
			return err
		}
		for key, r := range l.Reservations {
			if time.Since(r.At) < age {
				continue
			}
			if _, err := s.workloads.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			s.log.Info("releasing orphaned reservation", "project", project, "key", key)
			if err := s.Release(ctx, project, key); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Service) handleReserve(r micro.Request) {
	var req api.QuotaReserve
	if !decode(r, &req) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.Reserve(ctx, req.Project, req.Key, req.Demand)
	var rej *api.QuotaRejection
	switch {
	case errors.As(err, &rej):
		_ = bus.RespondError(r, api.StatusConflict, rej.Error(), api.ErrorBody{Code: "QuotaExceeded", Message: rej.Error(), Quota: rej})
	case err != nil:
		s.log.Error("reserve", "project", req.Project, "key", req.Key, "err", err)
		_ = bus.RespondError(r, api.StatusInternal, err.Error(), api.ErrorBody{Code: "Internal", Message: err.Error()})
	default:
		_ = bus.RespondJSON(r, map[string]bool{"reserved": true})
	}
}

func (s *Service) handleRelease(r micro.Request) {
	var req api.QuotaRelease
	if !decode(r, &req) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Release(ctx, req.Project, req.Key); err != nil {
		_ = bus.RespondError(r, api.StatusInternal, err.Error(), api.ErrorBody{Code: "Internal", Message: err.Error()})
		return
	}
	_ = bus.RespondJSON(r, map[string]bool{"released": true})
}

func (s *Service) handleSet(r micro.Request) {
	var req api.QuotaSet
	if !decode(r, &req) {
		return
	}
	if !api.IsDNSLabel(req.Project) {
		_ = bus.RespondError(r, api.StatusUnprocessable, "invalid project", api.ErrorBody{Code: "Invalid", Message: "project is not a DNS label"})
		return
	}
	switch req.Tier {
	case api.TierReserved, api.TierOnDemand, api.TierPreemptible:
	default:
		_ = bus.RespondError(r, api.StatusUnprocessable, "invalid tier", api.ErrorBody{Code: "Invalid", Message: fmt.Sprintf("tier %q: one of Reserved, OnDemand, Preemptible", req.Tier)})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.SetLimit(ctx, req.Project, req.Tier, req.Limit); err != nil {
		_ = bus.RespondError(r, api.StatusInternal, err.Error(), api.ErrorBody{Code: "Internal", Message: err.Error()})
		return
	}
	_ = bus.RespondJSON(r, map[string]bool{"set": true})
}

func (s *Service) handleGet(r micro.Request) {
	var req api.QuotaRelease // {project}
	if !decode(r, &req) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := s.Ledger(ctx, req.Project)
	if err != nil {
		_ = bus.RespondError(r, api.StatusInternal, err.Error(), api.ErrorBody{Code: "Internal", Message: err.Error()})
		return
	}
	_ = bus.RespondJSON(r, l)
}

func decode(r micro.Request, v any) bool {
	if err := json.Unmarshal(r.Data(), v); err != nil {
		_ = bus.RespondError(r, api.StatusBadRequest, "malformed request", api.ErrorBody{Code: "BadRequest", Message: err.Error()})
		return false
	}
	return true
}
