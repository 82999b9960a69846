// Package fit filters out member clusters without room for one more of the
// workload's pods, by the aggregator's inventory, in the pools the
// workload's tier may use (framework.CapacityFor: Reserved pools for
// Reserved work where a cluster has them, shared pools minus the burst
// buffer for OnDemand and Preemptible work). Kinds placed in every
// cluster (api.Kind.EveryCluster: the Daemon) pass: their pods follow the
// nodes.
package fit

import (
	"fmt"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "ResourceFit"

// Fit is the filter.
type Fit struct{}

var _ framework.Filter = (*Fit)(nil)

// New returns the filter.
func New() *Fit { return &Fit{} }

// Name implements framework.Filter.
func (*Fit) Name() string { return Name }

// Filter implements framework.Filter.
func (*Fit) Filter(w *framework.Workload, c *api.ClusterInfo) string {
	if api.EveryCluster(w.Kind) {
		// A Daemon's pods follow the cluster's nodes, one per node: a
		// DaemonSet belongs on a full cluster too (a node without room
		// leaves its pod Pending there, and the status says which
		// cluster is behind).
		return ""
	}
	t := framework.CapacityFor(w, c)
	free, freePods := t.Free()
	p := w.PerPod
	if t.Pools > 0 && freePods >= 1 && p.MilliCPU <= free.MilliCPU && p.MemoryBytes <= free.MemoryBytes &&
		p.MilliCPU <= t.MaxFree.MilliCPU && p.MemoryBytes <= t.MaxFree.MemoryBytes {
		return ""
	}
	where := t.Describe(w.Tier)
	switch {
	case t.Pools == 0:
		return fmt.Sprintf("no pools for %s", where)
	case freePods < 1:
		return fmt.Sprintf("no free pod slots (%d of %d used; %s)", t.ReqPods, t.AllocPods, where)
	case p.MilliCPU > free.MilliCPU:
		return fmt.Sprintf("insufficient cpu: pod needs %dm, %dm free (%s)", p.MilliCPU, max(free.MilliCPU, 0), where)
	case p.MemoryBytes > free.MemoryBytes:
		return fmt.Sprintf("insufficient memory: pod needs %d bytes, %d free (%s)", p.MemoryBytes, max(free.MemoryBytes, 0), where)
	case p.MilliCPU > t.MaxFree.MilliCPU:
		return fmt.Sprintf("no node has %dm cpu free (largest %dm)", p.MilliCPU, t.MaxFree.MilliCPU)
	case p.MemoryBytes > t.MaxFree.MemoryBytes:
		return fmt.Sprintf("no node has %d bytes of memory free (largest %d)", p.MemoryBytes, t.MaxFree.MemoryBytes)
	}
	return ""
}
