package taints_test

import (
	"strings"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	ft "atoll.dev/services/scheduler/framework/frameworktest"
	"atoll.dev/services/scheduler/plugins/taints"
)

func TestFilter(t *testing.T) {
	tainted := ft.Cluster("c", "a", 2, 0)
	tainted.Taints = []api.Toleration{{Key: "dedicated", Value: "ml", Effect: "NoSchedule"}}
	tests := []struct {
		name    string
		w       *framework.Workload
		c       *api.ClusterInfo
		wantSub string // "" means the cluster passes
	}{
		{"untolerated taint", ft.Workload(1, nil), tainted, "taint dedicated=ml:NoSchedule"},
		{"tolerated taint", ft.Workload(1, &api.Placement{Tolerations: []api.Toleration{{Key: "dedicated", Operator: "Equal", Value: "ml"}}}), tainted, ""},
		{"exists tolerates all", ft.Workload(1, &api.Placement{Tolerations: []api.Toleration{{Operator: "Exists"}}}), tainted, ""},
		{"default operator is Equal", ft.Workload(1, &api.Placement{Tolerations: []api.Toleration{{Key: "dedicated", Value: "ml"}}}), tainted, ""},
		{"Equal with another value does not tolerate", ft.Workload(1, &api.Placement{Tolerations: []api.Toleration{{Key: "dedicated", Value: "web"}}}), tainted, "not tolerated"},
		{"Exists on the key tolerates any value", ft.Workload(1, &api.Placement{Tolerations: []api.Toleration{{Key: "dedicated", Operator: "Exists"}}}), tainted, ""},
		{"another key does not tolerate", ft.Workload(1, &api.Placement{Tolerations: []api.Toleration{{Key: "gpu", Operator: "Exists"}}}), tainted, "not tolerated"},
		{"other effect does not tolerate", ft.Workload(1, &api.Placement{Tolerations: []api.Toleration{{Key: "dedicated", Operator: "Exists", Effect: "NoExecute"}}}), tainted, "not tolerated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := taints.New().Filter(tc.w, tc.c)
			if tc.wantSub == "" && got != "" || tc.wantSub != "" && !strings.Contains(got, tc.wantSub) {
				t.Errorf("got %q, want %q", got, tc.wantSub)
			}
		})
	}
}
