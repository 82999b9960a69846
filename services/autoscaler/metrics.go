package autoscaler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// scalerMetrics are the autoscaler's own metrics:
//
//	atoll_autoscaler_evaluations_total                  counter: Scalers evaluated
//	atoll_autoscaler_decisions_total{outcome}           counter: decisions that changed or were refused (scaled, refused)
//	atoll_autoscaler_sample_to_request_seconds          histogram: from the arrival of the newest sample a decision
//	                                                    used to its scale request (the autoscaler's reaction time)
//
// The queue, the lease and the breaker to admission report through
// bus.Metrics.
type scalerMetrics struct {
	evaluations prometheus.Counter
	decisions   *prometheus.CounterVec
	lag         prometheus.Histogram
}

func newScalerMetrics(reg prometheus.Registerer) *scalerMetrics {
	m := &scalerMetrics{
		evaluations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atoll_autoscaler_evaluations_total",
			Help: "Scalers evaluated by the recommender.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atoll_autoscaler_decisions_total",
			Help: "Decisions that asked admission to scale an App, by outcome (scaled, refused).",
		}, []string{"outcome"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "atoll_autoscaler_sample_to_request_seconds",
			Help:    "From the arrival of the newest sample a decision used to its scale request.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18), // 0.1 ms to 13 s
		}),
	}
	reg.MustRegister(m.evaluations, m.decisions, m.lag)
	return m
}

// evaluated records one evaluation; a nil scalerMetrics records nothing.
func (m *scalerMetrics) evaluated() {
	if m != nil {
		m.evaluations.Inc()
	}
}

// requested records a scale request for a decision whose newest sample
// arrived at arrived (zero: no sample, a schedule or a bound).
func (m *scalerMetrics) requested(arrived time.Time) {
	if m != nil && !arrived.IsZero() {
		m.lag.Observe(time.Since(arrived).Seconds())
	}
}

// decided records what came of a scale request.
func (m *scalerMetrics) decided(outcome string) {
	if m != nil {
		m.decisions.WithLabelValues(outcome).Inc()
	}
}
