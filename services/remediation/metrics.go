package remediation

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's own series; nil without an admin server.
type metrics struct {
	actions   *prometheus.CounterVec // cluster, action
	breaker   *prometheus.GaugeVec   // cluster, domain: 1 open
	nodes     *prometheus.GaugeVec   // cluster, phase
	reachable *prometheus.GaugeVec   // cluster
	oldest    *prometheus.GaugeVec   // cluster: age of the oldest escalation
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "atoll_remediation_actions_total",
			Help: "Actions taken on nodes (start is a cordon), by cluster and action."}, []string{"cluster", "action"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "atoll_remediation_breaker_open",
			Help: "1 while a failure domain's storm breaker is open (cooling included)."}, []string{"cluster", "domain"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "atoll_remediation_nodes",
			Help: "Nodes with remediation state, by phase."}, []string{"cluster", "phase"}),
		reachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "atoll_remediation_cluster_reachable",
			Help: "1 while the cluster's API server answers and its node watch has synced."}, []string{"cluster"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "atoll_remediation_oldest_escalation_seconds",
			Help: "Age of the oldest escalation still running or needing a human (alert past 48h)."}, []string{"cluster"}),
	}
	reg.MustRegister(m.actions, m.breaker, m.nodes, m.reachable, m.oldest)
	return m
}

// observe records a term's state after a reconcile.
func (m *metrics) observe(t *term, now time.Time) {
	if m == nil {
		return
	}
	c := t.c.member.Name
	m.reachable.WithLabelValues(c).Set(boolGauge(t.reachable))
	for _, b := range t.breakers.List() {
		m.breaker.WithLabelValues(c, b.Domain).Set(boolGauge(b.Open))
	}
	counts := map[Phase]int{}
	var oldest time.Duration
	for _, n := range t.states {
		if n.st.Idle() {
			continue
		}
		counts[n.st.Phase]++
		if (n.st.Active() || n.st.Phase == PhaseNeedsHuman) && !n.st.UnhealthySince.IsZero() {
			oldest = max(oldest, now.Sub(n.st.UnhealthySince))
		}
	}
	for _, p := range []Phase{PhaseHealthy, PhaseUnhealthy, PhaseCordoned, PhaseDraining, PhaseReplacing, PhaseReplaced, PhaseNeedsHuman} {
		m.nodes.WithLabelValues(c, string(p)).Set(float64(counts[p]))
	}
	m.oldest.WithLabelValues(c).Set(oldest.Seconds())
}

func (m *metrics) acted(cluster string, a Action) {
	if m == nil || a == ActNone {
		return
	}
	m.actions.WithLabelValues(cluster, string(a)).Inc()
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
