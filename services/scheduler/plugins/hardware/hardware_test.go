package hardware_test

import (
	"strings"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	ft "atoll.dev/services/scheduler/framework/frameworktest"
	"atoll.dev/services/scheduler/plugins/hardware"
)

func TestFilter(t *testing.T) {
	gpuWorkload := func(n int64, typ string) *framework.Workload {
		w := ft.Workload(1, &api.Placement{Hardware: &api.Hardware{GPUs: n, GPUType: typ}})
		w.PerPod.GPUs = n
		return w
	}
	tests := []struct {
		name    string
		w       *framework.Workload
		c       *api.ClusterInfo
		wantSub string // "" means the cluster passes
	}{
		{"no gpu needed", ft.Workload(1, nil), ft.Cluster("c", "a", 2, 0), ""},
		{"no gpu nodes", gpuWorkload(1, ""), ft.Cluster("c", "a", 2, 0), "no GPU nodes"},
		{"gpu nodes", gpuWorkload(2, ""), ft.WithGPUs(ft.Cluster("c", "a", 2, 0), 2, 8, "a100"), ""},
		{"wrong gpu type", gpuWorkload(1, "h100"), ft.WithGPUs(ft.Cluster("c", "a", 2, 0), 2, 8, "a100"), "no h100 GPU nodes"},
		{"too many gpus per pod", gpuWorkload(16, ""), ft.WithGPUs(ft.Cluster("c", "a", 2, 0), 2, 8, "a100"), "no node has 16 free GPUs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := hardware.New().Filter(tc.w, tc.c)
			if tc.wantSub == "" && got != "" || tc.wantSub != "" && !strings.Contains(got, tc.wantSub) {
				t.Errorf("got %q, want %q", got, tc.wantSub)
			}
		})
	}
}
