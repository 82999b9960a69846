package aggregator

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"atoll.dev/libs/api"
	"atoll.dev/libs/events"
)

func TestPhaseEventsFollowTheStepTheWorkloadHad(t *testing.T) {
	app := &api.Workload{Kind: api.KindApp, Metadata: api.Metadata{Project: "p", Name: "web", Generation: 3}}
	scaler := &api.Workload{Kind: api.KindScaler, Metadata: api.Metadata{Project: "p", Name: "web", Generation: 1}}
	tests := []struct {
		name string
		w    *api.Workload
		p    *api.PlacementDecision
		want []string
	}{
		{"placed in clusters", app, &api.PlacementDecision{Generation: 3, Shards: []api.Shard{{Cluster: "zone-a", Replicas: 1}}}, []string{api.EventPropagated}},
		{"placed nowhere: wants no pods", app, &api.PlacementDecision{Generation: 3}, []string{api.EventScheduled}},
		{"empty placement of an older generation", app, &api.PlacementDecision{Generation: 2}, []string{api.EventPropagated}},
		{"unschedulable", app, &api.PlacementDecision{Generation: 3, Unschedulable: true}, []string{api.EventPropagated}},
		{"no placement yet", app, nil, []string{api.EventPropagated}},
		{"a policy kind, never placed", scaler, nil, events.GenerationStarts()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, after(tc.w, tc.p, api.EventRunning))
		})
	}
	// An event that follows nothing keeps following nothing.
	assert.Empty(t, after(app, &api.PlacementDecision{Generation: 3}, api.EventDegraded))
}
