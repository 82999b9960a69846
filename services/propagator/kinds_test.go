package propagator

import (
	"errors"
	"testing"

	"atoll.dev/libs/api"
)

// TestEveryKindHasARenderer fails when a kind is registered with the API
// but the propagator cannot render it.
func TestEveryKindHasARenderer(t *testing.T) {
	handled := map[string]bool{}
	for _, k := range Kinds() {
		handled[k] = true
	}
	// Kinds that are not placed (a Scaler) have no shards to render.
	for _, k := range api.PlacedKindNames() {
		if !handled[k] {
			t.Errorf("kind %s is registered in libs/api but has no renderer in the propagator (render.go)", k)
		}
	}
}

// TestUnknownKindIsAnError: a kind without a renderer never panics.
func TestUnknownKindIsAnError(t *testing.T) {
	w := workload(api.KindApp, api.Control{})
	w.Kind = "Gadget"
	p := &api.PlacementDecision{Key: w.Key(), Generation: w.Metadata.Generation, Shards: []api.Shard{{Cluster: "zone-a", Replicas: 1}}}
	d := &desired{workload: w, placement: p, hashes: map[string]string{}}
	if _, err := d.render("zone-a"); !errors.Is(err, errUnknownKind) {
		t.Errorf("render of an unknown kind: %v, want errUnknownKind", err)
	}
	if _, err := d.hash("zone-a"); !errors.Is(err, errUnknownKind) {
		t.Errorf("hash of an unknown kind: %v, want errUnknownKind", err)
	}
}

// TestStampIsStable: the same render gives the same hash, and a change
// that matters gives another.
func TestStampIsStable(t *testing.T) {
	sh := api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 3}
	a, b := renderApp(workload(api.KindApp, api.Control{}), sh), renderApp(workload(api.KindApp, api.Control{}), sh)
	stamp(&a)
	stamp(&b)
	if a.hash == "" || a.hash != b.hash {
		t.Fatalf("hashes %q and %q of one render", a.hash, b.hash)
	}
	sh.Replicas = 4
	c := renderApp(workload(api.KindApp, api.Control{}), sh)
	stamp(&c)
	if c.hash == a.hash {
		t.Errorf("a scale kept the hash %q", a.hash)
	}
	if got := c.obj.(interface{ GetAnnotations() map[string]string }).GetAnnotations()[AnnoSpecHash]; got != c.hash {
		t.Errorf("annotation %q, want %q", got, c.hash)
	}
}
