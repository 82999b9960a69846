// Package fit filters out member clusters without room for one more of the
// workload's pods, by the aggregator's inventory.
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
	alloc, req, allocPods, reqPods, maxFree := framework.Totals(c)
	p := w.PerPod
	switch {
	case allocPods-reqPods < 1:
		return fmt.Sprintf("no free pod slots (%d of %d used)", reqPods, allocPods)
	case p.MilliCPU > alloc.MilliCPU-req.MilliCPU:
		return fmt.Sprintf("insufficient cpu: pod needs %dm, %dm free", p.MilliCPU, alloc.MilliCPU-req.MilliCPU)
	case p.MemoryBytes > alloc.MemoryBytes-req.MemoryBytes:
		return fmt.Sprintf("insufficient memory: pod needs %d bytes, %d free", p.MemoryBytes, alloc.MemoryBytes-req.MemoryBytes)
	case p.MilliCPU > maxFree.MilliCPU:
		return fmt.Sprintf("no node has %dm cpu free (largest %dm)", p.MilliCPU, maxFree.MilliCPU)
	case p.MemoryBytes > maxFree.MemoryBytes:
		return fmt.Sprintf("no node has %d bytes of memory free (largest %d)", p.MemoryBytes, maxFree.MemoryBytes)
	}
	return ""
}
