// Package aggregator is the aggregator service, the only writer of the
// status and clusters buckets. Informers on every member cluster watch the
// platform's labelled objects and the nodes; each workload's shards are
// folded into one status, and each cluster's capacity and health into its
// inventory record.
package aggregator

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/fx"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/debugstream"
)

// Module is the aggregator service for fx; it needs clusters.Members.
var Module = fx.Module("aggregator",
	fx.Provide(New),
	fx.Invoke(func(lc fx.Lifecycle, s *Service) { lc.Append(fx.StartStopHook(s.Start, s.Stop)) }),
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
	// Resync refolds every workload this often.
	Resync = 5 * time.Minute
)

// Service is the aggregator.
type Service struct {
	bus     *bus.Bus
	log     *slog.Logger
	members clusters.Members
	watches map[string]*watch

	status, clusterKV     jetstream.KeyValue
	workloads, placements *bus.Mirror
	queue                 *bus.Queue
	ops                   micro.Service       // the cluster-operations endpoint
	debug                 *debugstream.Server // logs and exec sessions (debug.go)
	cancel                context.CancelFunc
	wg                    sync.WaitGroup

	mu      sync.Mutex
	written map[string]writtenStatus // mu must be held: last status written per key
	events  map[string][]api.Event   // mu must be held: latest events per key
}

type writtenStatus struct {
	rev   uint64
	body  []byte // without the Updated time
	phase string
}

// New returns an aggregator for the member clusters.
func New(b *bus.Bus, log *slog.Logger, members clusters.Members) (*Service, error) {
	s := &Service{
		bus: b, log: log.With("component", "aggregator"), members: members,
		watches: map[string]*watch{}, written: map[string]writtenStatus{}, events: map[string][]api.Event{},
	}
	for _, m := range members {
		w, err := newWatch(s, m)
		if err != nil {
			return nil, err
		}
		s.watches[m.Name] = w
	}
	return s, nil
}

// Start opens the buckets and starts the informers, probes and folding.
func (s *Service) Start(ctx context.Context) error {
	for _, kv := range []struct {
		dst  *jetstream.KeyValue
		name string
	}{{&s.status, bus.BucketStatus}, {&s.clusterKV, bus.BucketClusters}} {
		var err error
		if *kv.dst, err = s.bus.KV(ctx, kv.name); err != nil {
			return err
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.queue = bus.NewQueue()
	for _, w := range s.watches {
		s.goRun(func() { w.run(rctx) })
	}
	var err error
	if s.workloads, err = s.bus.Mirror(rctx, bus.BucketWorkloads, s.queue.Add); err != nil {
		cancel()
		return err
	}
	if s.placements, err = s.bus.Mirror(rctx, bus.BucketPlacements, s.queue.Add); err != nil {
		cancel()
		return err
	}
	// Refold everything now and then: a missed change costs latency, never correctness.
	s.goRun(func() { s.workloads.Resync(rctx, Resync, s.queue, nil) })
	s.goRun(func() { s.queue.Run(rctx, StatusWorkers, s.log, s.fold) })
	if err := s.startOps(); err != nil {
		s.Stop()
		return err
	}
	if err := s.startDebug(); err != nil {
		s.Stop()
		return err
	}
	return nil
}

// Stop unregisters the cluster-operations endpoint and stops the informers and probes.
func (s *Service) Stop() {
	s.stopDebug()
	s.stopOps()
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
}

func (s *Service) goRun(fn func()) {
	s.wg.Add(1)
	go func() { defer s.wg.Done(); fn() }()
}

// recordEvent keeps the latest Kubernetes events of a workload.
func (s *Service) recordEvent(key string, e api.Event) {
	s.mu.Lock()
	evs := append(s.events[key], e)
	if len(evs) > MaxEvents {
		evs = evs[len(evs)-MaxEvents:]
	}
	s.events[key] = evs
	s.mu.Unlock()
	s.queue.Add(key)
}

func (s *Service) latestEvents(key string) []api.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]api.Event(nil), s.events[key]...)
}

func (s *Service) emit(ctx context.Context, subj, id string, v any) {
	b, _ := json.Marshal(v)
	if _, err := s.bus.Publish(ctx, subj, id, b, nil); err != nil {
		s.log.Warn("publish event", "subject", subj, "err", err)
	}
}
