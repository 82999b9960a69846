package propagator

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// applyMetrics are the propagator's own metrics, per member cluster:
//
//	atoll_propagator_apply_duration_seconds{cluster}  histogram: applying one shard (namespace, create or server-side apply)
//	atoll_propagator_apply_errors_total{cluster}      counter: applies that failed (the key is retried)
//
// Queues, breakers and leases report through bus.Metrics.
type applyMetrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

func newApplyMetrics(reg prometheus.Registerer) *applyMetrics {
	m := &applyMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atoll_propagator_apply_duration_seconds",
			Help:    "Time to apply one shard to a member cluster: its namespace, then a create or a server-side apply.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15), // 1 ms to 16 s
		}, []string{"cluster"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atoll_propagator_apply_errors_total",
			Help: "Applies of a shard to a member cluster that failed; the shard is retried with backoff.",
		}, []string{"cluster"}),
	}
	reg.MustRegister(m.duration, m.errors)
	return m
}

// applied records an apply to cluster that began at start; a nil
// applyMetrics records nothing.
func (m *applyMetrics) applied(cluster string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.duration.WithLabelValues(cluster).Observe(time.Since(start).Seconds())
	if err != nil {
		m.errors.WithLabelValues(cluster).Inc()
	}
}
