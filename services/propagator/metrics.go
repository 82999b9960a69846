package propagator

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// applyMetrics are the propagator's own metrics, per member cluster:
//
//	atoll_propagator_apply_duration_seconds{cluster}  histogram: applying one shard (namespace, create or server-side apply)
//	atoll_propagator_apply_errors_total{cluster}      counter: applies that failed (the key is retried)
//	atoll_propagator_resync_drifted_total{cluster}    counter: shards a resync pass found changed by someone else, or not written in this term
//
// Queues, breakers and leases report through bus.Metrics.
type applyMetrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	drift    *prometheus.CounterVec
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
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atoll_propagator_resync_drifted_total",
			Help: "Shards a resync pass applied again: their main object's generation moved since this term wrote it, or this term had not written it.",
		}, []string{"cluster"}),
	}
	reg.MustRegister(m.duration, m.errors, m.drift)
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

// drifted counts a shard a resync pass applies again in cluster.
func (m *applyMetrics) drifted(cluster string) {
	if m == nil {
		return
	}
	m.drift.WithLabelValues(cluster).Inc()
}
