package fit_test

import (
	"strings"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	ft "atoll.dev/services/scheduler/framework/frameworktest"
	"atoll.dev/services/scheduler/plugins/fit"
)

func TestFilter(t *testing.T) {
	full := ft.Cluster("c", "a", 1, 110)
	tests := []struct {
		name    string
		w       *framework.Workload
		c       *api.ClusterInfo
		wantSub string // "" means the cluster passes
	}{
		{"room", ft.Workload(1, nil), ft.Cluster("c", "a", 1, 0), ""},
		{"no pod slots", ft.Workload(1, nil), full, "no free pod slots"},
		{"pod bigger than any node", &framework.Workload{Placement: &api.Placement{}, PerPod: api.Quantities{MilliCPU: 40000}}, ft.Cluster("c", "a", 2, 0), "no node has 40000m"},
		{"cluster out of cpu", ft.Workload(1, nil), ft.Cluster("c", "a", 1, 32), "insufficient cpu"},
		{"a Daemon on a full cluster", &framework.Workload{Kind: api.KindDaemon, Placement: &api.Placement{}, PerPod: api.Quantities{MilliCPU: 100}}, full, ""},
		{"an App on the same full cluster", &framework.Workload{Kind: api.KindApp, Placement: &api.Placement{}, PerPod: api.Quantities{MilliCPU: 100}}, full, "no free pod slots"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := fit.New().Filter(tc.w, tc.c)
			if tc.wantSub == "" && got != "" || tc.wantSub != "" && !strings.Contains(got, tc.wantSub) {
				t.Errorf("got %q, want %q", got, tc.wantSub)
			}
		})
	}
}
