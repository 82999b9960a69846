package scheduler

import (
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/api"
)

// TestKindTableMatchesTheAPI: every kind the API registers as placed has
// an entry in the scheduler's table of kinds, and none it registers
// unplaced (a Scaler) has one; so a newly registered kind fails here until
// the scheduler handles it.
func TestKindTableMatchesTheAPI(t *testing.T) {
	table := kinds()
	placed := map[string]bool{}
	for _, k := range api.PlacedKindNames() {
		placed[k] = true
	}
	for _, k := range api.KindNames() {
		t.Run(k, func(t *testing.T) {
			if _, got := table[k]; got != placed[k] {
				t.Errorf("kind %s in the scheduler's table (kinds.go): %v, want %v (placed: %v)", k, got, placed[k], placed[k])
			}
		})
	}
	registered := map[string]bool{}
	for _, k := range api.KindNames() {
		registered[k] = true
	}
	for k := range table {
		if !registered[k] {
			t.Errorf("the scheduler's table has kind %s, which libs/api does not register", k)
		}
	}
	if _, ok := table[api.KindScaler]; ok || api.Placed(api.KindScaler) {
		t.Errorf("a Scaler is placed or in the table; want it unplaced and absent")
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
