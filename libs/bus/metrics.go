package bus

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"atoll.dev/libs/bus/lease"
)

// Metrics are the Prometheus metrics of what this package runs for one
// service: its micro endpoints (Serve), its work queues (Queue), its
// breakers (BreakerSet) and its leases (LeaseHook). A service makes one
// with NewMetrics on its own registry (libs/daemon/admin does, adding a
// service label) and hands it to each of those. A nil *Metrics records
// nothing, so code that runs without an admin server (most tests) passes
// nil.
//
// Series:
//
//	atoll_micro_request_duration_seconds{endpoint}   histogram: each request, decode to reply
//	atoll_micro_request_errors_total{endpoint,code}  counter: replies with an error code
//	atoll_reconcile_duration_seconds{queue}          histogram: each reconcile of a key
//	atoll_reconcile_errors_total{queue}              counter: reconciles that failed (the key is retried)
//	atoll_reconcile_lag_seconds{queue}               histogram: from a key's first queueing to the end
//	                                                 of the reconcile that succeeded for it (the SLI)
//	atoll_queue_depth{queue}                         gauge: keys ready and waiting for a worker
//	atoll_breaker_state{target}                      gauge: 0 closed, 1 half-open, 2 open
//	atoll_lease_held{lease}                          gauge: 1 while this replica holds the lease
type Metrics struct {
	requestDuration   *prometheus.HistogramVec
	requestErrors     *prometheus.CounterVec
	reconcileDuration *prometheus.HistogramVec
	reconcileErrors   *prometheus.CounterVec
	reconcileLag      *prometheus.HistogramVec
	leaseHeld         *prometheus.GaugeVec
	live              *liveCollector
}

// NewMetrics registers the package's metrics on reg; call it once per
// registry.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atoll_micro_request_duration_seconds",
			Help:    "Time to answer a request to a micro endpoint, from decoding it to sending the reply.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms to 16 s
		}, []string{"endpoint"}),
		requestErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atoll_micro_request_errors_total",
			Help: "Requests to a micro endpoint answered with an error code (4xx the caller's fault, 5xx the service's).",
		}, []string{"endpoint", "code"}),
		reconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atoll_reconcile_duration_seconds",
			Help:    "Time one reconcile of one key took.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"queue"}),
		reconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atoll_reconcile_errors_total",
			Help: "Reconciles that failed; their key is retried with backoff.",
		}, []string{"queue"}),
		reconcileLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atoll_reconcile_lag_seconds",
			Help:    "From a change of a key being queued until a reconcile of it succeeded: how far the world trails the state.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18), // 1 ms to 131 s
		}, []string{"queue"}),
		leaseHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "atoll_lease_held",
			Help: "1 while this replica holds the lease, 0 otherwise.",
		}, []string{"lease"}),
		live: &liveCollector{
			depth:  prometheus.NewDesc("atoll_queue_depth", "Keys ready and waiting for a worker.", []string{"queue"}, nil),
			state:  prometheus.NewDesc("atoll_breaker_state", "Circuit breaker state per target: 0 closed, 1 half-open, 2 open.", []string{"target"}, nil),
			queues: map[*Queue]string{},
		},
	}
	reg.MustRegister(m.requestDuration, m.requestErrors, m.reconcileDuration, m.reconcileErrors, m.reconcileLag, m.leaseHeld, m.live)
	return m
}

// endpointDone records one answered request.
func (m *Metrics) endpointDone(endpoint string, code int, seconds float64) {
	if m == nil {
		return
	}
	m.requestDuration.WithLabelValues(endpoint).Observe(seconds)
	if code >= 400 {
		m.requestErrors.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	}
}

// LeaseHook returns a lease.Options.OnChange that sets atoll_lease_held
// and then calls next (when not nil).
func (m *Metrics) LeaseHook(next func(name string, held bool)) func(name string, held bool) {
	if m == nil {
		return next
	}
	return func(name string, held bool) {
		v := 0.0
		if held {
			v = 1
		}
		m.leaseHeld.WithLabelValues(name).Set(v)
		if next != nil {
			next(name, held)
		}
	}
}

// breakerStates is a BreakerSet seen by the collector.
type breakerStates interface {
	states(yield func(target string, st gobreaker.State))
}

// liveCollector reads queue depths and breaker states when scraped, so
// they are never stale: a queue counts while it runs, a breaker's state is
// what gobreaker says now (an open breaker turns half-open lazily).
type liveCollector struct {
	depth, state *prometheus.Desc

	mu       sync.Mutex
	queues   map[*Queue]string // mu must be held: running queues, by name
	breakers []breakerStates   // mu must be held
}

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.state
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	depth := map[string]int{}
	for q, name := range c.queues {
		depth[name] += q.Len()
	}
	breakers := append([]breakerStates(nil), c.breakers...)
	c.mu.Unlock()
	for name, n := range depth {
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(n), name)
	}
	seen := map[string]bool{}
	for _, b := range breakers {
		b.states(func(target string, st gobreaker.State) {
			if !seen[target] { // one series per target, whichever set has it first
				seen[target] = true
				ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, float64(st), target)
			}
		})
	}
}

func (c *liveCollector) addQueue(q *Queue, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queues[q] = name
}

func (c *liveCollector) removeQueue(q *Queue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.queues, q)
}

func (c *liveCollector) addBreakers(b breakerStates) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.breakers = append(c.breakers, b)
}

// Elector opens the leases bucket and returns holder's elector there, the
// way every leased service sets it up: o's logger defaults to log, and a
// change of any lease also sets atoll_lease_held in m (which may be nil);
// o.Instance defaults to lease.InstanceOf(holder), so a restarted replica
// takes back its own leases at once.
func (b *Bus) Elector(ctx context.Context, holder string, o lease.Options, log *slog.Logger, m *Metrics) (*lease.Elector, error) {
	kv, err := b.KV(ctx, BucketLeases)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = log
	}
	if o.Instance == "" {
		o.Instance = lease.InstanceOf(holder)
	}
	o.OnChange = m.LeaseHook(o.OnChange)
	el, err := lease.NewElector(kv, holder, o)
	if err != nil {
		return nil, fmt.Errorf("lease elector %s: %w", holder, err)
	}
	return el, nil
}
