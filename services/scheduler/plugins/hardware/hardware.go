// Package hardware filters out member clusters without the accelerators a
// workload asks for: GPUs of the requested type, enough on one node.
package hardware

import (
	"fmt"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "Hardware"

// Hardware is the filter.
type Hardware struct{}

var _ framework.Filter = (*Hardware)(nil)

// New returns the filter.
func New() *Hardware { return &Hardware{} }

// Name implements framework.Filter.
func (*Hardware) Name() string { return Name }

// Filter implements framework.Filter.
func (*Hardware) Filter(w *framework.Workload, c *api.ClusterInfo) string {
	gpus := w.PerPod.GPUs
	gpuType := ""
	if h := w.Placement.Hardware; h != nil {
		gpuType = h.GPUType
		gpus = max(gpus, h.GPUs)
	}
	if gpus == 0 {
		return ""
	}
	var total, best int64
	for _, p := range c.Pools {
		if gpuType != "" && p.GPUType != gpuType {
			continue
		}
		total += p.Allocatable.GPUs
		best = max(best, p.MaxNodeFree.GPUs)
	}
	switch {
	case total == 0 && gpuType != "":
		return fmt.Sprintf("no %s GPU nodes", gpuType)
	case total == 0:
		return "no GPU nodes"
	case best < gpus:
		return fmt.Sprintf("no node has %d free GPUs (largest %d)", gpus, best)
	}
	return ""
}
