package aggregator

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

func TestSetQueued(t *testing.T) {
	at := time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		p    api.PlacementDecision
		want api.Status
	}{
		{"not queued", api.PlacementDecision{Unschedulable: true, Decided: at}, api.Status{}},
		{"queued", api.PlacementDecision{Unschedulable: true, Queue: "Reserved", Position: 2, Decided: at},
			api.Status{Queue: "Reserved", Position: 2, QueuedAt: at}},
		{"preempted", api.PlacementDecision{Unschedulable: true, Queue: "Preemptible", Position: 7, PreemptedBy: "p.app.x", Decided: at},
			api.Status{Queue: "Preemptible", Position: 7, PreemptedBy: "p.app.x", QueuedAt: at}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got api.Status
			setQueued(&tc.p, &got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}
