package plugins_test

import (
	"strings"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	ft "atoll.dev/services/scheduler/framework/frameworktest"
	"atoll.dev/services/scheduler/plugins"
	"atoll.dev/services/scheduler/plugins/affinity"
	"atoll.dev/services/scheduler/plugins/fit"
	"atoll.dev/services/scheduler/plugins/hardware"
	"atoll.dev/services/scheduler/plugins/health"
	"atoll.dev/services/scheduler/plugins/leastallocated"
	"atoll.dev/services/scheduler/plugins/mostallocated"
	"atoll.dev/services/scheduler/plugins/taints"
	"atoll.dev/services/scheduler/plugins/zonebalance"
)

func TestRegistryNamesMatch(t *testing.T) {
	for name, f := range plugins.Filters {
		if got := f().Name(); got != name {
			t.Errorf("filter registered as %s calls itself %s", name, got)
		}
	}
	for name, f := range plugins.Scorers {
		if got := f().Name(); got != name {
			t.Errorf("scorer registered as %s calls itself %s", name, got)
		}
	}
	if len(plugins.FilterOrder) != len(plugins.Filters) {
		t.Errorf("FilterOrder lists %d of %d filters", len(plugins.FilterOrder), len(plugins.Filters))
	}
}

func gpuWorkload(n int64, typ string) *framework.Workload {
	w := ft.Workload(1, &api.Placement{Hardware: &api.Hardware{GPUs: n, GPUType: typ}})
	w.PerPod.GPUs = n
	return w
}

func TestFilters(t *testing.T) {
	unhealthy := ft.Cluster("c", "a", 2, 0)
	unhealthy.Healthy, unhealthy.Message = false, "readyz timed out"
	cordoned := ft.Cluster("c", "a", 2, 0)
	cordoned.Cordoned = true
	labelled := ft.Cluster("c", "a", 2, 0)
	labelled.Labels = map[string]string{"env": "prod"}
	tainted := ft.Cluster("c", "a", 2, 0)
	tainted.Taints = []api.Toleration{{Key: "dedicated", Value: "ml", Effect: "NoSchedule"}}
	full := ft.Cluster("c", "a", 1, 110)
	tests := []struct {
		name    string
		filter  framework.Filter
		w       *framework.Workload
		c       *api.ClusterInfo
		wantSub string // "" means pass
	}{
		{"healthy passes", health.New(), ft.Workload(1, nil), ft.Cluster("c", "a", 2, 0), ""},
		{"unhealthy", health.New(), ft.Workload(1, nil), unhealthy, "readyz timed out"},
		{"cordoned", health.New(), ft.Workload(1, nil), cordoned, "cordoned"},
		{"zone allowed", affinity.New(), ft.Workload(1, &api.Placement{Zones: []string{"a", "b"}}), ft.Cluster("c", "a", 2, 0), ""},
		{"zone not allowed", affinity.New(), ft.Workload(1, &api.Placement{Zones: []string{"b"}}), ft.Cluster("c", "a", 2, 0), "zone a is not among"},
		{"selector matches", affinity.New(), ft.Workload(1, &api.Placement{ClusterSelector: map[string]string{"env": "prod"}}), labelled, ""},
		{"selector misses", affinity.New(), ft.Workload(1, &api.Placement{ClusterSelector: map[string]string{"env": "dev"}}), labelled, "env=dev required"},
		{"untolerated taint", taints.New(), ft.Workload(1, nil), tainted, "taint dedicated=ml:NoSchedule"},
		{"tolerated taint", taints.New(), ft.Workload(1, &api.Placement{Tolerations: []api.Toleration{{Key: "dedicated", Operator: "Equal", Value: "ml"}}}), tainted, ""},
		{"exists tolerates all", taints.New(), ft.Workload(1, &api.Placement{Tolerations: []api.Toleration{{Operator: "Exists"}}}), tainted, ""},
		{"room", fit.New(), ft.Workload(1, nil), ft.Cluster("c", "a", 1, 0), ""},
		{"no pod slots", fit.New(), ft.Workload(1, nil), full, "no free pod slots"},
		{"pod bigger than any node", fit.New(), &framework.Workload{Placement: &api.Placement{}, PerPod: api.Quantities{MilliCPU: 40000}}, ft.Cluster("c", "a", 2, 0), "no node has 40000m"},
		{"no gpu needed", hardware.New(), ft.Workload(1, nil), ft.Cluster("c", "a", 2, 0), ""},
		{"no gpu nodes", hardware.New(), gpuWorkload(1, ""), ft.Cluster("c", "a", 2, 0), "no GPU nodes"},
		{"gpu nodes", hardware.New(), gpuWorkload(2, ""), ft.WithGPUs(ft.Cluster("c", "a", 2, 0), 2, 8, "a100"), ""},
		{"wrong gpu type", hardware.New(), gpuWorkload(1, "h100"), ft.WithGPUs(ft.Cluster("c", "a", 2, 0), 2, 8, "a100"), "no h100 GPU nodes"},
		{"too many gpus per pod", hardware.New(), gpuWorkload(16, ""), ft.WithGPUs(ft.Cluster("c", "a", 2, 0), 2, 8, "a100"), "no node has 16 free GPUs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.filter.Filter(tc.w, tc.c)
			if tc.wantSub == "" && got != "" || tc.wantSub != "" && !strings.Contains(got, tc.wantSub) {
				t.Errorf("%s: got %q, want %q", tc.filter.Name(), got, tc.wantSub)
			}
		})
	}
}

func TestScorers(t *testing.T) {
	idle := ft.Cluster("idle", "a", 2, 0)
	busy := ft.Cluster("busy", "b", 2, 50)
	all := []*api.ClusterInfo{idle, busy}
	w := ft.Workload(1, nil)
	tests := []struct {
		name   string
		scorer framework.Scorer
		better *api.ClusterInfo
		worse  *api.ClusterInfo
	}{
		{"least allocated prefers idle", leastallocated.New(), idle, busy},
		{"most allocated prefers busy", mostallocated.New(), busy, idle},
		{"zone balance prefers the emptier zone", zonebalance.New(), idle, busy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, wo := tc.scorer.Score(w, tc.better, all), tc.scorer.Score(w, tc.worse, all)
			if b <= wo || b > framework.MaxScore || wo < 0 {
				t.Errorf("%s: better %d, worse %d", tc.scorer.Name(), b, wo)
			}
		})
	}
}
