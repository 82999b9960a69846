package health_test

import (
	"strings"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	ft "atoll.dev/services/scheduler/framework/frameworktest"
	"atoll.dev/services/scheduler/plugins/health"
)

func TestFilter(t *testing.T) {
	unhealthy := ft.Cluster("c", "a", 2, 0)
	unhealthy.Healthy, unhealthy.Message = false, "readyz timed out"
	cordoned := ft.Cluster("c", "a", 2, 0)
	cordoned.Cordoned = true
	tests := []struct {
		name    string
		w       *framework.Workload
		c       *api.ClusterInfo
		wantSub string // "" means the cluster passes
	}{
		{"healthy passes", ft.Workload(1, nil), ft.Cluster("c", "a", 2, 0), ""},
		{"unhealthy", ft.Workload(1, nil), unhealthy, "readyz timed out"},
		{"cordoned", ft.Workload(1, nil), cordoned, "cordoned"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := health.New().Filter(tc.w, tc.c)
			if tc.wantSub == "" && got != "" || tc.wantSub != "" && !strings.Contains(got, tc.wantSub) {
				t.Errorf("got %q, want %q", got, tc.wantSub)
			}
		})
	}
}
