// Package propagator is the propagator service: it turns each shard of a
// placement into native objects in its member cluster with server-side
// apply, and removes shards a placement no longer wants. Every member
// cluster has its own queue, workers and circuit breaker, so a dead cluster
// never slows the others.
package propagator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.uber.org/fx"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/events"
)

// Module is the propagator service for fx; it needs clusters.Members.
var Module = fx.Module("propagator",
	fx.Provide(New),
	fx.Invoke(func(lc fx.Lifecycle, s *Service) { lc.Append(fx.StartStopHook(s.Start, s.Stop)) }),
)

// Tunables.
const (
	// FieldManager owns the fields the propagator applies.
	FieldManager = "atoll-propagator"
	// WorkersPerCluster apply in parallel in each member cluster.
	WorkersPerCluster = 8
	// Resync re-applies every shard this often, to repair drift in the
	// clusters; the keys are spread over the period, never sent in a burst.
	Resync = 5 * time.Minute
)

// desired is what one workload should look like, as last read.
type desired struct {
	workload  *api.Workload          // nil when deleted
	placement *api.PlacementDecision // nil when deleted
	rev       uint64                 // placement revision
	applied   map[string]bool        // clusters done for rev
	announced bool                   // propagated event sent for rev
}

// Service is the propagator.
type Service struct {
	bus      *bus.Bus
	log      *slog.Logger
	members  clusters.Members
	breakers *bus.BreakerSet[struct{}]

	workloads, placements *bus.Mirror
	top                   *bus.Queue
	targets               map[string]*target
	cancel                context.CancelFunc
	wg                    sync.WaitGroup

	mu    sync.Mutex
	state map[string]*desired // mu must be held
}

// New returns a propagator for the member clusters.
func New(b *bus.Bus, log *slog.Logger, members clusters.Members) (*Service, error) {
	log = log.With("component", "propagator")
	s := &Service{
		bus: b, log: log, members: members,
		breakers: bus.NewBreakerSet[struct{}](bus.BreakerPolicy{ConsecutiveFailures: 3, OpenFor: 5 * time.Second, Logger: log, IsFailure: isClusterFailure,
			IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) }}),
		targets: map[string]*target{},
		state:   map[string]*desired{},
	}
	for _, m := range members {
		t, err := newTarget(s, m)
		if err != nil {
			return nil, err
		}
		s.targets[m.Name] = t
	}
	return s, nil
}

// Start begins watching placements and applying shards.
func (s *Service) Start(ctx context.Context) error {
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.top = bus.NewQueue()
	var err error
	if s.workloads, err = s.bus.Mirror(rctx, bus.BucketWorkloads, nil); err != nil {
		cancel()
		return err
	}
	// The workload mirror must be current before placements are acted on.
	select {
	case <-s.workloads.Ready():
	case <-ctx.Done():
		cancel()
		return ctx.Err()
	}
	if s.placements, err = s.bus.Mirror(rctx, bus.BucketPlacements, s.top.Add); err != nil {
		cancel()
		return err
	}
	for _, t := range s.targets {
		s.goRun(func() { t.run(rctx) })
	}
	s.goRun(func() { s.placements.Resync(rctx, Resync, s.top, s.forgetApplied) })
	s.goRun(func() { s.top.Run(rctx, 4, s.log, s.reconcile) })
	return nil
}

// Stop stops applying; calls in flight finish.
func (s *Service) Stop() {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
}

// forgetApplied makes every shard due again, so the resync re-applies it
// and repairs drift in the clusters.
func (s *Service) forgetApplied() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.state {
		d.applied = map[string]bool{}
	}
}

func (s *Service) goRun(fn func()) {
	s.wg.Add(1)
	go func() { defer s.wg.Done(); fn() }()
}

// reconcile reads one placement and its workload and hands the key to
// every cluster that must act: those with a shard, and those holding one.
func (s *Service) reconcile(ctx context.Context, key string) error {
	d := &desired{applied: map[string]bool{}}
	if pe, ok := s.placements.Get(key); ok {
		var p api.PlacementDecision
		if err := json.Unmarshal(pe.Value, &p); err != nil {
			s.log.Error("undecodable placement", "key", key, "err", err)
			return nil
		}
		d.placement, d.rev = &p, pe.Revision
	}
	if d.placement != nil {
		we, ok := s.workloads.Get(key)
		if !ok {
			// The mirror may lag the placement by a moment; a placement whose
			// workload is really gone is deleted by the scheduler, which
			// brings the key back here.
			s.top.AddAfter(key, 100*time.Millisecond)
			return nil
		}
		w, err := api.Decode(we.Value)
		if err != nil {
			s.log.Error("undecodable workload", "key", key, "err", err)
			return nil
		}
		// A placement made for an older generation waits for the scheduler.
		if w.Metadata.Generation != d.placement.Generation {
			s.top.AddAfter(key, 100*time.Millisecond)
			return nil
		}
		d.workload = w
	}
	s.mu.Lock()
	if old, ok := s.state[key]; ok && old.rev == d.rev && d.rev != 0 {
		d = old // same placement revision: keep what was applied
	} else {
		s.state[key] = d
	}
	s.mu.Unlock()
	// Every cluster looks, not only those that want or hold a shard: one
	// may be creating the shard of the previous placement right now, and
	// holds it only once that create returns; its queue runs the key again
	// after, and removes what the new placement no longer wants.
	for _, t := range s.targets {
		t.queue.Add(key)
	}
	return nil
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

// snapshot returns the desired state of key, and whether cluster has
// already applied it.
func (s *Service) snapshot(key, cluster string) (*desired, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.state[key]
	return d, d != nil && d.applied[cluster]
}

// applied records that cluster has applied rev of key and announces the
// workload propagated once every shard has.
func (s *Service) markApplied(ctx context.Context, key, cluster string, d *desired) {
	s.mu.Lock()
	if s.state[key] != d {
		s.mu.Unlock()
		return
	}
	d.applied[cluster] = true
	all := !d.announced
	for _, sh := range d.placement.Shards {
		all = all && d.applied[sh.Cluster]
	}
	if all {
		d.announced = true
	}
	s.mu.Unlock()
	if !all {
		return
	}
	if len(d.placement.Shards) == 0 {
		return
	}
	msg := fmt.Sprintf("%d shards applied", len(d.placement.Shards))
	events.PublishAsync(ctx, s.bus, d.workload, api.EventPropagated, msg, d.rev, s.log)
}

// forget drops the state of a key no cluster holds or wants any more.
func (s *Service) forget(key string, d *desired) {
	if d == nil || d.placement != nil {
		return
	}
	for _, t := range s.targets {
		if t.holds(key) {
			return
		}
	}
	s.mu.Lock()
	if s.state[key] == d {
		delete(s.state, key)
	}
	s.mu.Unlock()
}
