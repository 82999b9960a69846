package affinity_test

import (
	"strings"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	ft "atoll.dev/services/scheduler/framework/frameworktest"
	"atoll.dev/services/scheduler/plugins/affinity"
)

func TestFilter(t *testing.T) {
	labelled := ft.Cluster("c", "a", 2, 0)
	labelled.Labels = map[string]string{"env": "prod"}
	tests := []struct {
		name    string
		w       *framework.Workload
		c       *api.ClusterInfo
		wantSub string // "" means the cluster passes
	}{
		{"zone allowed", ft.Workload(1, &api.Placement{Zones: []string{"a", "b"}}), ft.Cluster("c", "a", 2, 0), ""},
		{"zone not allowed", ft.Workload(1, &api.Placement{Zones: []string{"b"}}), ft.Cluster("c", "a", 2, 0), "zone a is not among"},
		{"selector matches", ft.Workload(1, &api.Placement{ClusterSelector: map[string]string{"env": "prod"}}), labelled, ""},
		{"selector misses", ft.Workload(1, &api.Placement{ClusterSelector: map[string]string{"env": "dev"}}), labelled, "env=dev required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := affinity.New().Filter(tc.w, tc.c)
			if tc.wantSub == "" && got != "" || tc.wantSub != "" && !strings.Contains(got, tc.wantSub) {
				t.Errorf("got %q, want %q", got, tc.wantSub)
			}
		})
	}
}
