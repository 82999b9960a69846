// Package scheduler is the scheduler service, the only writer of the
// placements bucket. It watches workloads and the cluster inventory and
// decides, per workload, which member clusters run which share of it.
// Decisions are sticky: a placement changes only when its workload's
// generation does or one of its clusters stops passing the health filter.
package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
)

// Module is the scheduler service for fx.
var Module = fx.Module("scheduler",
	fx.Provide(New),
	fx.Invoke(func(lc fx.Lifecycle, s *Service) { lc.Append(fx.StartStopHook(s.Start, s.Stop)) }),
)

// Tunables.
const (
	// Workers reconcile workloads in parallel.
	Workers = 8
	// Resync re-reads every workload this often.
	Resync = 5 * time.Minute
	// RetryUnschedulable re-tries an unplaced workload this often.
	RetryUnschedulable = 5 * time.Second
)

// Service is the scheduler.
type Service struct {
	bus *bus.Bus
	log *slog.Logger

	workloads, placements, clusters, status jetstream.KeyValue
	queue                                   *bus.Queue
	cancel                                  context.CancelFunc
	wg                                      sync.WaitGroup

	mu       sync.RWMutex
	snapshot map[string]*api.ClusterInfo // mu must be held
	// assumed holds what this scheduler placed on each cluster since the
	// cluster's last inventory record, so a burst of decisions does not all
	// see the same free capacity (kube-scheduler's "assume").
	assumed map[string]api.PoolInfo // mu must be held
}

// New returns a scheduler on b.
func New(b *bus.Bus, log *slog.Logger) *Service {
	return &Service{bus: b, log: log.With("component", "scheduler"), snapshot: map[string]*api.ClusterInfo{}, assumed: map[string]api.PoolInfo{}}
}

// Start opens the buckets and starts watching.
func (s *Service) Start(ctx context.Context) error {
	var err error
	for _, kv := range []struct {
		dst  *jetstream.KeyValue
		name string
	}{{&s.workloads, bus.BucketWorkloads}, {&s.placements, bus.BucketPlacements}, {&s.clusters, bus.BucketClusters}, {&s.status, bus.BucketStatus}} {
		if *kv.dst, err = s.bus.KV(ctx, kv.name); err != nil {
			return err
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.queue = bus.NewQueue()
	// The inventory first, so the first decisions see the clusters.
	inventoryLoaded := make(chan struct{})
	var once sync.Once
	s.goRun(func() { s.watchClusters(rctx, func() { once.Do(func() { close(inventoryLoaded) }) }) })
	select {
	case <-inventoryLoaded:
	case <-time.After(5 * time.Second):
		s.log.Warn("cluster inventory not loaded after 5s; scheduling with what is known")
	case <-ctx.Done():
		return ctx.Err()
	}
	s.goRun(func() { _ = s.bus.WatchKeys(rctx, bus.BucketWorkloads, Resync, s.queue, nil) })
	s.goRun(func() { s.queue.Run(rctx, Workers, s.log, s.Reconcile) })
	return nil
}

// Stop stops watching; decisions in flight finish.
func (s *Service) Stop() {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
}

func (s *Service) goRun(fn func()) {
	s.wg.Add(1)
	go func() { defer s.wg.Done(); fn() }()
}

// watchClusters keeps the inventory snapshot and requeues every workload
// when a cluster's schedulability changes (health, cordon, taints, labels).
func (s *Service) watchClusters(ctx context.Context, loaded func()) {
	for ctx.Err() == nil {
		w, err := s.clusters.WatchAll(ctx)
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for e := range w.Updates() {
			if e == nil {
				loaded()
				continue
			}
			changed := false
			s.mu.Lock()
			old := s.snapshot[e.Key()]
			if e.Operation() != jetstream.KeyValuePut {
				delete(s.snapshot, e.Key())
				changed = true
			} else {
				var ci api.ClusterInfo
				if err := json.Unmarshal(e.Value(), &ci); err == nil {
					s.snapshot[e.Key()] = &ci
					delete(s.assumed, e.Key())
					changed = old == nil || schedulability(old) != schedulability(&ci)
				}
			}
			s.mu.Unlock()
			if changed {
				s.log.Info("cluster schedulability changed", "cluster", e.Key())
				s.requeueAll(ctx)
			}
		}
		_ = w.Stop()
	}
	loaded()
}

func schedulability(c *api.ClusterInfo) string {
	b, _ := json.Marshal([]any{c.Healthy, c.Cordoned, c.Taints, c.Labels, c.Zone})
	return string(b)
}

func (s *Service) requeueAll(ctx context.Context) {
	keys, err := s.workloads.ListKeys(ctx)
	if err != nil {
		return
	}
	for k := range keys.Keys() {
		s.queue.Add(k)
	}
}

// assumedPool names the synthetic pool that carries assumed usage.
const assumedPool = "(assumed)"

// Snapshot returns the known clusters sorted by name, with what was placed
// on them since their last inventory counted as requested.
func (s *Service) Snapshot() []*api.ClusterInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*api.ClusterInfo, 0, len(s.snapshot))
	for name, c := range s.snapshot {
		if a, ok := s.assumed[name]; ok {
			cp := *c
			cp.Pools = make(map[string]api.PoolInfo, len(c.Pools)+1)
			for k, v := range c.Pools {
				cp.Pools[k] = v
			}
			cp.Pools[assumedPool] = a
			c = &cp
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *api.ClusterInfo) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

// Reconcile decides the placement of one workload.
func (s *Service) Reconcile(ctx context.Context, key string) error {
	we, err := s.workloads.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// Deleted: its placement goes, and with it the shards.
		if err := s.placements.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("delete placement %s: %w", key, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read workload %s: %w", key, err)
	}
	w, err := api.Decode(we.Value())
	if err != nil {
		s.log.Error("undecodable workload", "key", key, "err", err)
		return nil
	}
	var (
		prev    *api.PlacementDecision
		prevRev uint64
	)
	if pe, err := s.placements.Get(ctx, key); err == nil {
		prev, prevRev = &api.PlacementDecision{}, pe.Revision()
		if err := json.Unmarshal(pe.Value(), prev); err != nil {
			prev = nil
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("read placement %s: %w", key, err)
	}
	snap := s.Snapshot()
	if prev != nil && (s.stillGood(prev, w, snap) || s.finished(ctx, key, w)) {
		return nil
	}
	d := Decide(w, snap, time.Now().UTC())
	if prev != nil && sameDecision(prev, &d) {
		if d.Unschedulable {
			s.queue.AddAfter(key, RetryUnschedulable)
		}
		return nil
	}
	b, err := json.Marshal(&d)
	if err != nil {
		return err
	}
	rev, err := bus.CompareAndSet(ctx, s.placements, key, b, prevRev)
	if err == nil {
		s.assume(w, &d)
	}
	if errors.Is(err, bus.ErrConflict) {
		s.queue.Add(key) // another replica decided; look again
		return nil
	}
	if err != nil {
		return fmt.Errorf("write placement %s: %w", key, err)
	}
	event, msg := api.EventScheduled, fmt.Sprintf("%d shards", len(d.Shards))
	if w.Control.Stopped {
		msg = "stopped: no shards"
	}
	if d.Unschedulable {
		event, msg = api.EventUnschedulable, fmt.Sprintf("no cluster can take it: %d rejections", len(d.Reasons))
		s.queue.AddAfter(key, RetryUnschedulable)
	}
	s.emit(ctx, w, event, msg, rev)
	s.log.Debug("placed", "key", key, "generation", d.Generation, "shards", d.Shards, "unschedulable", d.Unschedulable)
	return nil
}

// assume counts a decision's pods as requested until the clusters report them.
func (s *Service) assume(w *api.Workload, d *api.PlacementDecision) {
	per := w.Spec.PodTemplate().PodRequests()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sh := range d.Shards {
		a := s.assumed[sh.Cluster]
		n := int64(sh.Replicas)
		a.Requested.MilliCPU += per.MilliCPU * n
		a.Requested.MemoryBytes += per.MemoryBytes * n
		a.Requested.GPUs += per.GPUs * n
		a.RequestedPods += n
		s.assumed[sh.Cluster] = a
	}
}

// finished says whether a run-to-completion workload of this generation
// is done: its placement stays, so a lost cluster does not re-run it.
func (s *Service) finished(ctx context.Context, key string, w *api.Workload) bool {
	if w.Kind == api.KindApp {
		return false
	}
	e, err := s.status.Get(ctx, key)
	if err != nil {
		return false
	}
	var st api.Status
	if json.Unmarshal(e.Value(), &st) != nil || st.Generation != w.Metadata.Generation {
		return false
	}
	return st.Phase == api.PhaseSucceeded || st.Phase == api.PhaseFailed
}

// stillGood says whether a previous decision stands: same generation,
// placed, and every shard's cluster still healthy. A cordoned cluster keeps
// the shards it has; it only takes no new ones.
func (s *Service) stillGood(prev *api.PlacementDecision, w *api.Workload, snap []*api.ClusterInfo) bool {
	if prev.Generation != w.Metadata.Generation || prev.Unschedulable {
		return false
	}
	for _, sh := range prev.Shards {
		i := slices.IndexFunc(snap, func(c *api.ClusterInfo) bool { return c.Name == sh.Cluster })
		if i < 0 || !snap[i].Healthy {
			return false
		}
	}
	return true
}

func sameDecision(a, b *api.PlacementDecision) bool {
	ja, _ := json.Marshal([]any{a.Generation, a.Shards, a.Unschedulable, a.Reasons})
	jb, _ := json.Marshal([]any{b.Generation, b.Shards, b.Unschedulable, b.Reasons})
	return bytes.Equal(ja, jb)
}

func (s *Service) emit(ctx context.Context, w *api.Workload, event, msg string, rev uint64) {
	events.PublishAsync(ctx, s.bus, w, event, msg, rev, s.log)
}
