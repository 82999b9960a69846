package propagator

import (
	"errors"
	"slices"
	"testing"

	"atoll.dev/libs/api"
	"github.com/google/go-cmp/cmp"
)

// TestKindsTable: every kind the scheduler places has an entry in the
// propagator's table, and a kind it never places (a Scaler) has none, so
// a kind registered in libs/api fails here until kinds.go handles it.
func TestKindsTable(t *testing.T) {
	handled := map[string]bool{}
	for _, k := range newService(nil, quietLog(), nil).Kinds() {
		handled[k] = true
	}
	for _, k := range api.KindNames() {
		t.Run(k, func(t *testing.T) {
			if want := api.Placed(k); handled[k] != want {
				t.Errorf("kind %s in the propagator's table: %v, want %v (a kind is there if and only if it is placed; see newKinds in kinds.go)", k, handled[k], want)
			}
		})
	}
	for k := range handled {
		if !slices.Contains(api.KindNames(), k) {
			t.Errorf("kind %s is in the propagator's table but not registered in libs/api", k)
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

// TestOwned: the objects deleted with a shard are its main object (the
// kind's resource, which the informers watch) and what is applied beside
// or before it.
func TestOwned(t *testing.T) {
	tests := []struct {
		kind string
		want []owned
	}{
		{api.KindApp, []owned{{deployments, "web"}, {statefulsets, "web"}, {pdbs, "web"}, {services, "web"}, {ingresses, "web"}}},
		{api.KindCronJob, []owned{{cronjobs, "web"}}},
		{api.KindDaemon, []owned{{daemonsets, "web"}}},
		{api.KindJobSet, []owned{{jobs, "web"}}},
		{api.KindPod, []owned{{pods, "web"}, {claims, api.PodClaimName("web", "zone-a")}}},
		{api.KindTrainingJob, []owned{{jobs, "web"}, {services, "web"}}},
	}
	kinds := newKinds()
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			k := kinds[tc.kind]
			if k == nil {
				t.Fatalf("kind %s not in the table", tc.kind)
			}
			got := k.owned("zone-a", "web")
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(owned{})); diff != "" {
				t.Errorf("owned (-want +got):\n%s", diff)
			}
			if got[0].gvr != k.resource() {
				t.Errorf("first owned object %v, want the main object %v", got[0].gvr, k.resource())
			}
		})
	}
}
