// Package health filters out member clusters that are down, unreachable
// past their grace period, or cordoned.
package health

import (
	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "ClusterHealth"

// Health is the filter.
type Health struct{}

var _ framework.Filter = (*Health)(nil)

// New returns the filter.
func New() *Health { return &Health{} }

// Name implements framework.Filter.
func (*Health) Name() string { return Name }

// Filter implements framework.Filter.
func (*Health) Filter(_ *framework.Workload, c *api.ClusterInfo) string {
	switch {
	case !c.Healthy:
		if c.Message != "" {
			return "cluster is unhealthy: " + c.Message
		}
		return "cluster is unhealthy"
	case c.Cordoned:
		return "cluster is cordoned"
	}
	return ""
}
