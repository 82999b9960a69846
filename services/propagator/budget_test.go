package propagator

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	"atoll.dev/libs/api"
)

func TestRenderBudget(t *testing.T) {
	sh := api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 3}
	for _, tc := range []struct {
		name     string
		a        *api.Availability
		min, max *intstr.IntOrString
	}{
		{"default", nil, nil, ptrTo(intstr.FromString("25%"))},
		{"max unavailable", &api.Availability{MaxUnavailable: "2"}, nil, ptrTo(intstr.FromInt32(2))},
		{"min available", &api.Availability{MinAvailable: "100%"}, ptrTo(intstr.FromString("100%")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := workload(api.KindApp, api.Control{})
			w.Spec.(*api.AppSpec).Availability = tc.a
			b := renderBudget(w, sh)
			if b.Name != "w" || b.Namespace != api.Namespace("p") {
				t.Fatalf("budget %s/%s, want %s/w", b.Namespace, b.Name, api.Namespace("p"))
			}
			if got, want := b.Spec.Selector.MatchLabels, selector(w); len(got) != len(want) || got[api.LabelWorkload] != "w" {
				t.Fatalf("selector %v, want %v", got, want)
			}
			if !same(b.Spec.MinAvailable, tc.min) || !same(b.Spec.MaxUnavailable, tc.max) {
				t.Fatalf("min %v max %v, want min %v max %v", b.Spec.MinAvailable, b.Spec.MaxUnavailable, tc.min, tc.max)
			}
			// The budget is part of the Deployment's hash.
			d := renderApp(w, sh)
			if got := d.obj.(interface{ GetAnnotations() map[string]string }).GetAnnotations()[AnnoAvailability]; got == "" {
				t.Fatal("deployment carries no availability annotation")
			}
		})
	}
}

func ptrTo(v intstr.IntOrString) *intstr.IntOrString { return &v }

func same(a, b *intstr.IntOrString) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.String() == b.String()
}
