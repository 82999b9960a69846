package scheduler

import (
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/api"
)

// TestEveryKindHasADivider fails when a kind is registered with the API
// but the scheduler cannot divide it.
func TestEveryKindHasADivider(t *testing.T) {
	handled := map[string]bool{}
	for _, k := range Kinds() {
		handled[k] = true
	}
	// Kinds that are not placed (a Scaler) never reach a divider.
	for _, k := range api.PlacedKindNames() {
		if !handled[k] {
			t.Errorf("kind %s is registered in libs/api but has no divider in the scheduler (decide.go)", k)
		}
	}
}

// TestUnknownKindIsUnschedulable: a kind without a divider never panics;
// it is unschedulable and the reason names the kind.
func TestUnknownKindIsUnschedulable(t *testing.T) {
	w := app(3, nil)
	w.Kind = "Gadget"
	d := Decide(w, threeZones(), time.Time{})
	if !d.Unschedulable || len(d.Shards) != 0 {
		t.Fatalf("decision %+v, want unschedulable without shards", d)
	}
	if len(d.Reasons) != 1 || d.Reasons[0].Filter != "Kind" || !strings.Contains(d.Reasons[0].Reason, `"Gadget"`) {
		t.Errorf("reasons %+v, want one naming the kind", d.Reasons)
	}
}
