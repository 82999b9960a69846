// Package taints filters out member clusters whose taints the workload
// does not tolerate.
package taints

import (
	"fmt"

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

func tolerated(taint api.Toleration, tols []api.Toleration) bool {
	for _, t := range tols {
		if t.Effect != "" && t.Effect != taint.Effect {
			continue
		}
		if t.Key == "" && t.Operator == "Exists" {
			return true
		}
		if t.Key != taint.Key {
			continue
		}
		if t.Operator == "Exists" || t.Value == taint.Value {
			return true
		}
	}
	return false
}
