// Package affinity filters member clusters by the workload's allowed zones
// and cluster label selector.
package affinity

import (
	"fmt"
	"slices"
	"strings"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "ClusterAffinity"

// Affinity is the filter.
type Affinity struct{}

var _ framework.Filter = (*Affinity)(nil)

// New returns the filter.
func New() *Affinity { return &Affinity{} }

// Name implements framework.Filter.
func (*Affinity) Name() string { return Name }

// Filter implements framework.Filter.
func (*Affinity) Filter(w *framework.Workload, c *api.ClusterInfo) string {
	pl := w.Placement
	if len(pl.Zones) > 0 && !slices.Contains(pl.Zones, c.Zone) {
		return fmt.Sprintf("zone %s is not among the allowed zones %s", c.Zone, strings.Join(pl.Zones, ","))
	}
	for k, v := range pl.ClusterSelector {
		if got, ok := c.Labels[k]; !ok || got != v {
			return fmt.Sprintf("cluster label %s=%s required, cluster has %q", k, v, got)
		}
	}
	return ""
}
