package aggregator

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

func TestQueuedConditions(t *testing.T) {
	tests := []struct {
		name string
		p    api.PlacementDecision
		want []string // condition types
	}{
		{"not queued", api.PlacementDecision{Unschedulable: true}, nil},
		{"queued", api.PlacementDecision{Unschedulable: true, Queue: "Reserved", Position: 2}, []string{"Queued"}},
		{"preempted", api.PlacementDecision{Unschedulable: true, Queue: "Preemptible", Position: 1, PreemptedBy: "p.app.x"}, []string{"Queued", "Preempted"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range queuedConditions(&tc.p) {
				got = append(got, c.Type)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}
