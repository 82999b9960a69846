package propagator

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestPrepareStatefulApp: an App's in-place steps leave its StatefulSet
// form to the ordinary apply (they read Deployments only).
func TestPrepareStatefulApp(t *testing.T) {
	o := object{gvr: statefulsets, name: "db", obj: &appsv1.StatefulSet{}}
	if err := (appKind{}).prepare(context.Background(), &target{}, o, "atoll-p"); err != nil {
		t.Fatalf("prepare of a StatefulSet: %v", err)
	}
}
