package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/libs/events"
)

// The gateway's metrics, beside those of libs/bus (its requests' breakers):
//
//	atoll_http_request_duration_seconds{route,method}  histogram: each HTTP request, by chi route pattern
//	atoll_http_requests_total{route,method,code}       counter
//	atoll_sli_api_requests_total                       counter: Compute API (/v1) requests answered
//	atoll_sli_api_errors_total                         counter: those answered 5xx; availability is
//	                                                   1 - rate(errors) / rate(requests)
//	atoll_sli_submit_to_propagated_seconds{start,tier} histogram: from a generation's start (admitted,
//	atoll_sli_submit_to_running_seconds{start,tier}    updated, scaled, ...) to its propagated / running
//	                                                   event, by the workload's tier (Reserved, OnDemand,
//	                                                   Preemptible; "unknown" when the read cache lacks it)
//
// The launch SLIs come from the events stream (launchSLI): every gateway
// replica reads every event, so every replica's histograms hold the same
// observations; aggregate them across replicas with max or avg, not sum
// (quantiles are the same either way).
//
// The same observations also feed the last hour's history per minute that
// GET /v1/slis serves to the console (slis.go).
type httpMetrics struct {
	duration    *prometheus.HistogramVec
	requests    *prometheus.CounterVec
	apiRequests prometheus.Counter
	apiErrors   prometheus.Counter
	history     *sliHistory // the last hour of the SLIs, per minute
}

func newHTTPMetrics(reg prometheus.Registerer, history *sliHistory) *httpMetrics {
	m := &httpMetrics{
		history: history,
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atoll_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern (streams count until they end).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route", "method"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atoll_http_requests_total",
			Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		apiRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atoll_sli_api_requests_total",
			Help: "Compute API (/v1) requests answered: the availability SLI's denominator.",
		}),
		apiErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atoll_sli_api_errors_total",
			Help: "Compute API (/v1) requests answered with a 5xx: availability is 1 - errors/requests.",
		}),
	}
	reg.MustRegister(m.duration, m.requests, m.apiRequests, m.apiErrors)
	return m
}

// observe records one answered request; a nil httpMetrics records nothing.
func (m *httpMetrics) observe(r *http.Request, status int, elapsed time.Duration) {
	if m == nil {
		return
	}
	route := "unmatched"
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
		route = rc.RoutePattern()
	}
	if status == 0 {
		status = http.StatusOK // a hijacked connection (exec) answered its upgrade
	}
	m.duration.WithLabelValues(route, r.Method).Observe(elapsed.Seconds())
	m.requests.WithLabelValues(route, r.Method, strconv.Itoa(status)).Inc()
	if strings.HasPrefix(route, "/v1/") {
		m.apiRequests.Inc()
		if status >= 500 {
			m.apiErrors.Inc()
		}
		m.history.request(time.Now(), status >= 500)
	}
}

// Instrument records the gateway's metrics on a's registry; call it
// before Start.
func (s *Service) Instrument(a *admin.Server) {
	history := newSLIHistory()
	s.reqs = newHTTPMetrics(a.Registerer(), history)
	s.launch = newLaunchSLI(a.Registerer(), history)
	// The read cache exists once Start runs, which is before the launch
	// SLI reads its first event.
	s.launch.tierOf = func(project, kind, name string) string {
		if s.cache == nil {
			return tierUnknown
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if it, ok, _ := s.cache.Get(ctx, api.Key(project, kind, name)); ok && it.Tier != "" {
			return string(it.Tier)
		}
		return tierUnknown
	}
	s.req.Breakers().Instrument(a.Metrics())
}

// Ready reports whether the gateway serves: the bus connected, its small
// mirrors full and its API port open (Start has returned). The workloads'
// cache may still be filling: it answers from the buckets meanwhile.
func (s *Service) Ready(context.Context) error {
	if !s.bus.NC.IsConnected() {
		return errors.New("bus disconnected")
	}
	return nil
}

// launchSLI measures, from the events stream, how long each generation of
// a workload takes from its start to propagated and to running, with the
// stream's own timestamps (one clock for all). It keeps the start of each
// workload's current generation until its running event, at most
// launchSLIMaxAge.
type launchSLI struct {
	propagated, running *prometheus.HistogramVec
	history             *sliHistory // the last hour of the SLIs, per minute
	// tierOf names a workload's tier, tierUnknown when it cannot; nil
	// names none.
	tierOf func(project, kind, name string) string

	mu   sync.Mutex
	open map[string]*generation // mu must be held: by project/kind/name
}

// generation is a workload's generation whose launch is being measured.
type generation struct {
	number     int64
	start      string    // the event that opened it
	at         time.Time // when that event was stored
	propagated bool      // observed already
}

// tierUnknown is the tier label of a workload the read cache does not hold.
const tierUnknown = "unknown"

// tier is the tier label of e's workload.
func (l *launchSLI) tier(e api.WorkloadEvent) string {
	if l.tierOf == nil {
		return tierUnknown
	}
	return l.tierOf(e.Project, e.Kind, e.Name)
}

// launchSLIMaxAge bounds how long a generation waits for its running event.
const launchSLIMaxAge = time.Hour

func newLaunchSLI(reg prometheus.Registerer, history *sliHistory) *launchSLI {
	buckets := prometheus.ExponentialBuckets(0.01, 2, 16) // 10 ms to 5.5 min
	l := &launchSLI{
		propagated: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atoll_sli_submit_to_propagated_seconds",
			Help:    "From the event that starts a workload's generation (admitted, updated, scaled, ...) to its propagated event.",
			Buckets: buckets,
		}, []string{"start", "tier"}),
		running: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atoll_sli_submit_to_running_seconds",
			Help:    "From the event that starts a workload's generation (admitted, updated, scaled, ...) to its running event.",
			Buckets: buckets,
		}, []string{"start", "tier"}),
		open:    map[string]*generation{},
		history: history,
	}
	reg.MustRegister(l.propagated, l.running)
	return l
}

// observe takes one event stored at at.
func (l *launchSLI) observe(e api.WorkloadEvent, at time.Time) {
	key := e.Project + "/" + e.Kind + "/" + e.Name
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.open[key]
	switch {
	case events.IsGenerationStart(e.Event):
		l.open[key] = &generation{number: e.Generation, start: e.Event, at: at}
	case g == nil || g.number != e.Generation:
	case e.Event == api.EventPropagated && !g.propagated:
		g.propagated = true
		l.propagated.WithLabelValues(g.start, l.tier(e)).Observe(at.Sub(g.at).Seconds())
	case e.Event == api.EventRunning:
		l.running.WithLabelValues(g.start, l.tier(e)).Observe(at.Sub(g.at).Seconds())
		l.history.launch(at, at.Sub(g.at))
		delete(l.open, key)
	case e.Event == api.EventDeleted, e.Event == api.EventSucceeded, e.Event == api.EventFailed:
		delete(l.open, key)
	}
}

// forget drops the generations started before cutoff.
func (l *launchSLI) forget(cutoff time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, g := range l.open {
		if g.at.Before(cutoff) {
			delete(l.open, k)
		}
	}
}

// run reads the events published from now on until ctx ends, retrying
// the consumer's creation until it succeeds
// (an ordered consumer recreates itself across the bus's outages).
func (l *launchSLI) run(ctx context.Context, js jetstream.JetStream, log *slog.Logger) {
	var (
		cc  jetstream.ConsumeContext
		err error
	)
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		if cc, err = l.consume(ctx, js); err == nil {
			break
		}
		log.Warn("launch SLI: open event consumer", "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(bus.Jitter(delay, 0.2)):
		}
	}
	defer cc.Stop()
	sweep := time.NewTicker(time.Minute)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			l.forget(time.Now().Add(-launchSLIMaxAge))
		}
	}
}

// consume starts an ordered consumer of every event from now on.
func (l *launchSLI) consume(ctx context.Context, js jetstream.JetStream) (jetstream.ConsumeContext, error) {
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventRoot + ".>"},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, err
	}
	return cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		var e api.WorkloadEvent
		if json.Unmarshal(m.Data(), &e) == nil {
			l.observe(e, meta.Timestamp)
		}
	})
}
