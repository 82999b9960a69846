// Package taints filters out member clusters whose taints the workload
// does not tolerate.
package taints

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "TaintToleration"

// Taints is the filter.
type Taints struct{}

var _ framework.Filter = (*Taints)(nil)

// New returns the filter.
func New() *Taints { return &Taints{} }

// Name implements framework.Filter.
func (*Taints) Name() string { return Name }

// Filter implements framework.Filter.
func (*Taints) Filter(w *framework.Workload, c *api.ClusterInfo) string {
	for _, taint := range c.Taints {
		if taint.Effect == "PreferNoSchedule" {
			continue
		}
		if !tolerated(taint, w.Placement.Tolerations) {
			return fmt.Sprintf("taint %s=%s:%s not tolerated", taint.Key, taint.Value, taint.Effect)
		}
	}
	return ""
}

// tolerated matches as the kube-scheduler does
// (k8s.io/component-helpers/scheduling/corev1): an empty effect matches
// every effect, Exists with an empty key every taint, Equal (the default)
// key and value.
func tolerated(taint api.Toleration, tols []api.Toleration) bool {
	kt := &corev1.Taint{Key: taint.Key, Value: taint.Value, Effect: corev1.TaintEffect(taint.Effect)}
	kts := make([]corev1.Toleration, len(tols))
	for i, t := range tols {
		kts[i] = corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect)}
	}
	return corev1helpers.TolerationsTolerateTaint(klog.Background(), kts, kt, false)
}
