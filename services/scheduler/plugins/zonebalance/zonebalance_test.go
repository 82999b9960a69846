package zonebalance_test

import (
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
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
			s := zonebalance.New()
			b, w := s.Score(ft.Workload(1, nil), tc.better, all), s.Score(ft.Workload(1, nil), tc.worse, all)
			if b <= w || b > framework.MaxScore || w < 0 {
				t.Errorf("better %d, worse %d", b, w)
			}
		})
	}
}
