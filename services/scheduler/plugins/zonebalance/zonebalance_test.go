package zonebalance_test

import (
	"testing"

	"atoll.dev/libs/api"
	ft "atoll.dev/services/scheduler/framework/frameworktest"
	"atoll.dev/services/scheduler/plugins/zonebalance"
)

func TestScore(t *testing.T) {
	idle := ft.Cluster("idle", "a", 2, 0)
	busy := ft.Cluster("busy", "b", 2, 50)
	all := []*api.ClusterInfo{idle, busy}
	tests := []struct {
		name          string
		better, worse *api.ClusterInfo
	}{
		{"prefers the emptier zone", idle, busy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ft.Prefers(t, zonebalance.New(), ft.Workload(1, nil), tc.better, tc.worse, all)
		})
	}
}
