// Package autoscaler is the autoscaler service: it keeps each Scaler's App
// at the replicas the Scaler's recommender (package recommend) chooses.
//
// Inputs. Every replica mirrors the Scalers of the workloads bucket, the
// Apps they name and those Apps' statuses (ready pods: keyed mirrors, so
// what it holds grows with the Scalers, not with the region; an App a
// Scaler names before its mirror covers it is read from the bucket), and
// subscribes to the metric
// samples on atoll.metrics.<project>.<app>.<metric>: cpu and memory from
// the aggregator (which holds the member clusters' credentials), custom
// metrics from the gateway. It keeps only the latest sample of each
// metric, so standbys are warm.
//
// Acting. Only the holder of the lease "autoscaler" evaluates. A term
// evaluates a Scaler when a sample of its App arrives, when the Scaler or
// its App changes, and every SyncPeriod (so stale samples turn into
// failed metrics and schedules open and close). A change of replicas goes
// ONLY through admission's endpoint for the autoscaler
// (bus.AdmissionAutoscale, which only the autoscaler's user may call): quota applies as to any user's scale, and a
// refusal is a decision like any other.
//
// Decisions are data. Each Scaler's state in the scalers bucket (one key
// per Scaler, written by this service only) holds the recommender's
// history (recommendations of the stabilization windows, recent changes)
// and its recent decisions: inputs, each metric's proposal, the schedule
// floor, the chosen replicas and the reason. A term starts from that
// state, so a takeover keeps the windows. A change publishes the Scaler's
// scaled event, and a refusal its scale-refused event, with the reason,
// after the state that records it is written (events follow committed
// state; the event's revision is the state's).
package autoscaler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/libs/events"
	"atoll.dev/services/autoscaler/recommend"
)

// LeaseName is the lease a replica holds to act.
const LeaseName = "autoscaler"

// Config tunes the service; zero fields take the defaults.
type Config struct {
	// SyncPeriod re-evaluates every Scaler this often (default 15s, the
	// HPA's).
	SyncPeriod time.Duration
	// Workers evaluate Scalers in parallel (default 8).
	Workers int
	// Decisions is how many recent decisions a Scaler's state keeps
	// (default 120).
	Decisions int
	// PersistEvery writes a Scaler's state at least this often while its
	// decisions do not change (default 30s); a changed decision is
	// written at once.
	PersistEvery time.Duration
	// Lease tunes the election (zero: the library's defaults).
	Lease lease.Options
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c *Config) defaults() {
	if c.SyncPeriod <= 0 {
		c.SyncPeriod = 15 * time.Second
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.Decisions <= 0 {
		c.Decisions = 120
	}
	if c.PersistEvery <= 0 {
		c.PersistEvery = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Service is the autoscaler.
type Service struct {
	bus    *bus.Bus
	log    *slog.Logger
	cfg    Config
	events *events.Publisher
	req    *bus.Requester
	holder string

	state   jetstream.KeyValue
	scalerM *bus.TypedMirror[*api.Workload] // the Scalers, specs defaulted (decodeScaler); shared, never modified
	appM    *bus.TypedMirror[appView]       // the Scalers' Apps, projected (views.go); keyed: SetKeys(targets)
	statusM *bus.TypedMirror[statusView]    // their statuses, projected (views.go); keyed the same
	// workloadsKV and statusKV answer for an App its mirrors do not cover yet.
	workloadsKV, statusKV jetstream.KeyValue
	sub                   *nats.Subscription
	cancel                context.CancelFunc
	wg                    sync.WaitGroup
	metrics               *bus.Metrics   // nil without an admin server
	own                   *scalerMetrics // nil without an admin server

	// term is the current term's queue while this replica holds the lease.
	term atomic.Pointer[term]

	mu      sync.Mutex
	samples map[string]*appSamples     // mu must be held: by App key
	targets map[string]map[string]bool // mu must be held: App key -> Scaler keys

	evaluations atomic.Uint64 // Scalers evaluated, for Evaluations

	schedules *recommend.Schedules // the Scalers' crons, parsed (bounded)

	// OnScaleRequest, when set, is called just before each scale request
	// with the arrival time of the newest sample the decision used (for
	// the sample-to-request lag; tests and benchmarks).
	OnScaleRequest func(scaler string, sampleArrived time.Time)
}

// appSamples are the latest samples of one App.
type appSamples struct {
	// parts are the latest sample of each metric from each member cluster
	// (the aggregator's), or "" for a whole-App sample (custom metrics).
	parts   map[string]map[string]api.MetricSample
	arrived time.Time // when the newest arrived here
}

// PartWindow is how much older than a metric's newest cluster part
// another cluster's part may be and still count: a cluster whose metrics
// stopped drops out of the sum (its pods then count as missing, see
// package recommend) instead of freezing it.
const PartWindow = 45 * time.Second

// combine is one sample per metric: the whole-App sample, or the sum of
// the fresh cluster parts.
func (as *appSamples) combine() map[string]api.MetricSample {
	out := make(map[string]api.MetricSample, len(as.parts))
	for metric, parts := range as.parts {
		whole, hasWhole := parts[""]
		var newest time.Time
		for c, p := range parts {
			if c != "" && p.At.After(newest) {
				newest = p.At
			}
		}
		if hasWhole && !whole.At.Before(newest) {
			out[metric] = whole
			continue
		}
		var sum api.MetricSample
		for c, p := range parts {
			if c == "" || p.At.Before(newest.Add(-PartWindow)) {
				continue
			}
			sum.Usage += p.Usage
			sum.Requests += p.Requests
			sum.Pods += p.Pods
		}
		if sum.Requests > 0 {
			sum.Value = 100 * sum.Usage / sum.Requests
			sum.At = newest
			out[metric] = sum
		}
	}
	return out
}

// New returns an autoscaler on b; cfg nil means the defaults.
func New(b *bus.Bus, log *slog.Logger, cfg *Config) *Service {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	c.defaults()
	log = log.With("component", "autoscaler")
	return &Service{
		bus: b, log: log, cfg: c,
		events:  events.NewPublisher(b, log, events.Options{}),
		req:     bus.NewRequester(b.NC, bus.RequestPolicy{Timeout: 5 * time.Second, RetryFor: 5 * time.Second, Breaker: bus.BreakerPolicy{Logger: log}}),
		holder:  lease.NewHolderID("autoscaler"),
		samples: map[string]*appSamples{}, targets: map[string]map[string]bool{},

		schedules: recommend.NewSchedules(recommend.DefaultSchedules),
	}
}

// Holder is this replica's name in the lease.
func (s *Service) Holder() string { return s.holder }

// Leading reports whether this replica holds the lease and acts.
func (s *Service) Leading() bool { return s.term.Load() != nil }

// Instrument records the service's metrics on a's registry; call it
// before Start.
func (s *Service) Instrument(a *admin.Server) {
	s.metrics = a.Metrics()
	s.own = newScalerMetrics(a.Registerer())
	s.req.Breakers().Instrument(s.metrics)
}

// Start opens the state bucket, starts the mirrors and the metrics
// subscription and campaigns for the lease; it does not wait for it.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.state, err = s.bus.KV(ctx, bus.BucketScalers); err != nil {
		return err
	}
	elector, err := s.bus.Elector(ctx, s.holder, s.cfg.Lease, s.log, s.metrics)
	if err != nil {
		return err
	}
	if s.workloadsKV, err = s.bus.KV(ctx, bus.BucketWorkloads); err != nil {
		return err
	}
	if s.statusKV, err = s.bus.KV(ctx, bus.BucketStatus); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	scalers := "*." + strings.ToLower(api.KindScaler) + ".*"
	apps := "*." + strings.ToLower(api.KindApp) + ".*"
	// Only the Apps the Scalers name (and their statuses) are mirrored:
	// the Scalers' mirror keys them (scalerChanged), so they exist first.
	if s.appM, err = bus.MirrorKeysOf(rctx, s.bus, bus.BucketWorkloads, apps, decodeApp, s.appChanged); err != nil {
		cancel()
		return err
	}
	if s.statusM, err = bus.MirrorKeysOf(rctx, s.bus, bus.BucketStatus, apps, decodeStatus, nil); err != nil {
		cancel()
		return err
	}
	// scalerChanged reads s.scalerM: a change that comes before the
	// assignment waits for it.
	scalerSet := make(chan struct{})
	s.scalerM, err = bus.MirrorOf(rctx, s.bus, bus.BucketWorkloads, scalers, decodeScaler, func(key string) {
		<-scalerSet
		s.scalerChanged(key)
	})
	close(scalerSet)
	if err != nil {
		cancel()
		return err
	}
	if s.sub, err = s.bus.NC.Subscribe(bus.MetricsRoot+".>", s.sample); err != nil {
		cancel()
		return fmt.Errorf("subscribe to metrics: %w", err)
	}
	_ = s.sub.SetPendingLimits(1<<20, 256<<20)
	s.wg.Go(func() { elector.Run(rctx, LeaseName, s.lead) })
	return nil
}

// Ready reports whether the replica can act: started, its mirrors full and
// the lease's state known.
func (s *Service) Ready(ctx context.Context) error {
	for _, ready := range []<-chan struct{}{s.scalerM.Ready(), s.appM.Ready(), s.statusM.Ready()} {
		select {
		case <-ready:
		default:
			return errors.New("mirrors filling")
		}
	}
	return admin.LeaseKnown(s.bus, LeaseName)(ctx)
}

// Stop ends the term, if any, releasing the lease.
func (s *Service) Stop() {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	s.scalerM.Stop()
	s.appM.Stop()
	s.statusM.Stop()
}

// sample takes one metric sample: atoll.metrics.<project>.<app>.<metric>.
func (s *Service) sample(m *nats.Msg) {
	parts := strings.Split(m.Subject, ".")
	if len(parts) != 5 {
		return
	}
	var smp api.MetricSample
	if err := json.Unmarshal(m.Data, &smp); err != nil {
		s.log.Debug("undecodable sample", "subject", m.Subject, "err", err)
		return
	}
	now := s.cfg.Now()
	if smp.At.IsZero() {
		smp.At = now
	}
	app := api.Key(parts[2], api.KindApp, parts[3])
	s.mu.Lock()
	as := s.samples[app]
	if as == nil {
		as = &appSamples{parts: map[string]map[string]api.MetricSample{}}
		s.samples[app] = as
	}
	byCluster := as.parts[parts[4]]
	if byCluster == nil {
		byCluster = map[string]api.MetricSample{}
		as.parts[parts[4]] = byCluster
	}
	if prev, ok := byCluster[smp.Cluster]; !ok || !smp.At.Before(prev.At) {
		byCluster[smp.Cluster] = smp
		as.arrived = now
	}
	var keys []string
	for k := range s.targets[app] {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	if t := s.term.Load(); t != nil {
		for _, k := range keys {
			t.queue.Add(k)
		}
	}
}

// scalerChanged indexes a Scaler by its App, has the App mirrored, and
// queues it.
func (s *Service) scalerChanged(key string) {
	e, ok := s.scalerM.Get(key)
	s.mu.Lock()
	var dropped []string // Apps no Scaler targets any more
	for app, set := range s.targets {
		delete(set, key)
		if len(set) == 0 {
			delete(s.targets, app)
			dropped = append(dropped, app)
		}
	}
	added := "" // an App no other Scaler targets
	if ok && e.Err == nil {
		if w := e.Value; w != nil {
			if sp, ok := w.Spec.(*api.ScalerSpec); ok {
				app := api.Key(w.Metadata.Project, api.KindApp, sp.Target)
				if s.targets[app] == nil {
					s.targets[app] = map[string]bool{}
					added = app
				}
				s.targets[app][key] = true
			}
		}
	}
	// A Scaler written again with the same App changes no target.
	changed := len(dropped) > 1 || len(dropped) == 1 && dropped[0] != added || len(dropped) == 0 && added != ""
	var apps []string
	if changed {
		apps = slices.Collect(maps.Keys(s.targets))
	}
	s.mu.Unlock()
	if changed {
		s.appM.SetKeys(apps)
		s.statusM.SetKeys(apps)
	}
	if t := s.term.Load(); t != nil {
		t.queue.Add(key)
	}
}

// appChanged queues the Scalers of a changed App.
func (s *Service) appChanged(key string) {
	t := s.term.Load()
	if t == nil {
		return
	}
	s.mu.Lock()
	var keys []string
	for k := range s.targets[key] {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	for _, k := range keys {
		t.queue.Add(k)
	}
}

// term is one holding of the lease.
type term struct {
	queue *bus.Queue

	mu     sync.Mutex
	states map[string]*scalerState // mu must be held: loaded states by Scaler key
}

// lead runs one term; it returns when ctx ends.
func (s *Service) lead(ctx context.Context) {
	for _, ready := range []<-chan struct{}{s.scalerM.Ready(), s.appM.Ready(), s.statusM.Ready()} {
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
	}
	t := &term{queue: bus.NewQueue(bus.Instrumented(s.metrics, "scalers")), states: map[string]*scalerState{}}
	s.term.Store(t)
	defer s.term.Store(nil)
	s.log.Info("term started", "holder", s.holder, "scalers", s.scalerM.Len())
	var wg sync.WaitGroup
	wg.Go(func() {
		t.queue.Run(ctx, s.cfg.Workers, s.log, func(ctx context.Context, key string) error { return s.reconcile(ctx, t, key) })
	})
	tick := time.NewTicker(s.cfg.SyncPeriod)
	defer tick.Stop()
	for {
		for _, k := range s.scalerM.Keys() {
			t.queue.Add(k)
		}
		select {
		case <-ctx.Done():
			t.queue.Close()
			wg.Wait()
			s.log.Info("term ended", "holder", s.holder)
			return
		case <-tick.C:
		}
	}
}

// Evaluations is how many evaluations this replica has made.
func (s *Service) Evaluations() uint64 { return s.evaluations.Load() }

// Samples returns a copy of the latest samples of an App (for tests and
// the benchmark).
func (s *Service) Samples(project, app string) map[string]api.MetricSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if as := s.samples[api.Key(project, api.KindApp, app)]; as != nil {
		return as.combine()
	}
	return map[string]api.MetricSample{}
}

// decodeScaler decodes a Scaler for the mirror, its spec defaulted once
// there, so that the readers, which share it, never modify it.
func decodeScaler(b []byte) (*api.Workload, error) {
	w, err := api.Decode(b)
	if err != nil {
		return nil, err
	}
	if sp, ok := w.Spec.(*api.ScalerSpec); ok {
		sp.Default()
	}
	return w, nil
}

// decodeStatus decodes an App's status for the mirror.
