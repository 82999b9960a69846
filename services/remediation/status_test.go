package remediation

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/disruption"
)

// populatedStatus is a ClusterStatus with every field of every nested
// type set (TestStatusFixturePopulated keeps it so when a field is added).
func populatedStatus() ClusterStatus {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	pod := disruption.PodRef{Namespace: "p", Name: "web-0", UID: "pod-uid"}
	return ClusterStatus{
		ClusterView: ClusterView{
			Cluster: "zone-a", Holder: "remediation-1", Reachable: true, Paused: "paused (region): freeze",
			Breakers: []BreakerState{{Domain: "zone/a", Unhealthy: 2, Total: 5, Allowed: 1, Open: true, OpenedAt: at(1), CoolingUntil: at(2)}},
			Time:     at(3),
		},
		Leases: []LeaseInfo{{Node: "n1", Owner: "remediation", Reason: "Ready=False", Expires: at(4)}},
		Nodes: []NodeState{{
			Cluster: "zone-a", Node: "n1", UID: "u1", Pool: "general", Zone: "a",
			Phase: PhaseReplacing, PhaseSince: at(5), Signal: "Ready=False", UnhealthySince: at(6),
			Waiting: "breaker zone/a open", Transitions: []time.Time{at(7), at(8)}, Flapping: true,
			Drain: DrainState{Started: at(9), Passes: 3, NextPass: at(10), Evicted: []disruption.PodRef{pod},
				Blocked: []disruption.Blocked{{Pod: pod, PDB: "p/web", Message: "would violate"}}, Force: true},
			Replace: ReplaceState{Attempt: 2, Name: "n1-r2", Started: at(11), Prev: "n1-r1", Done: true},
			History: []Entry{{Seq: 1, Time: at(12), Event: "cordoned", Message: "Ready=False for 30s"}},
		}},
	}
}

// requireAllSet fails when any field reachable from v (through structs
// and the first element of slices) holds its zero value.
func requireAllSet(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	require.False(t, v.IsZero(), "%s is zero in the fixture", path)
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			requireAllSet(t, path+"."+v.Type().Field(i).Name, v.Field(i))
		}
	case v.Kind() == reflect.Slice:
		requireAllSet(t, path+"[0]", v.Index(0))
	}
}

func TestStatusFixturePopulated(t *testing.T) {
	requireAllSet(t, "ClusterStatus", reflect.ValueOf(populatedStatus()))
}

// TestStatusWire: the status endpoint's reply (api types, ClusterStatus.API)
// is byte for byte the JSON the service sent before, which was its own
// types' (ClusterStatus, NodeState...), so the gateway, `atoll-admin
// remediation` and the remediation e2e read it unchanged.
func TestStatusWire(t *testing.T) {
	tests := []struct {
		name string
		st   ClusterStatus
	}{
		{"populated", populatedStatus()},
		{"empty", ClusterStatus{ClusterView: ClusterView{Cluster: "zone-b"}}},
		{"bare node", ClusterStatus{ClusterView: ClusterView{Cluster: "zone-c"},
			Nodes: []NodeState{{Cluster: "zone-c", Node: "n2", Phase: PhaseUnhealthy}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := json.Marshal([]ClusterStatus{tt.st})
			require.NoError(t, err)
			got, err := json.Marshal([]api.RemediationClusterStatus{tt.st.API()})
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
		})
	}
}

// TestScopeWire: pause and resume answer what their map did.
func TestScopeWire(t *testing.T) {
	tests := []struct {
		got  api.RemediationScope
		want map[string]string
	}{
		{api.RemediationScope{Paused: "zone-a"}, map[string]string{"paused": "zone-a"}},
		{api.RemediationScope{Resumed: "region"}, map[string]string{"resumed": "region"}},
	}
	for _, tt := range tests {
		want, err := json.Marshal(tt.want)
		require.NoError(t, err)
		got, err := json.Marshal(tt.got)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got))
	}
}
