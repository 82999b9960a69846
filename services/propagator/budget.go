package propagator

import (
	"context"
	"encoding/json"
	"fmt"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// Every App shard gets a PodDisruptionBudget next to its Deployment, of
// the same name, made from the App's availability budget (api.Availability,
// default api.DefaultMaxUnavailable), so that the drains of the
// remediation and upgrade services, which evict through the Eviction API,
// are application-aware. It is applied whenever the shard's Deployment is
// (the budget is stamped into the Deployment's annotations, so a budget
// change changes the shard's hash) and deleted with the shard.

var pdbs = policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets")

// AnnoAvailability on an App's Deployment is its shard's budget
// ("maxUnavailable=25%"), which makes a budget change a new spec hash.
const AnnoAvailability = "atoll.dev/availability"

// availabilityOf is the value of AnnoAvailability for an App.
func availabilityOf(s *api.AppSpec) string {
	kind, v := s.Availability.Budget()
	return kind + "=" + v
}

// renderBudget makes a shard's PodDisruptionBudget.
func renderBudget(w *api.Workload, sh api.Shard) *policyv1.PodDisruptionBudget {
	s := w.Spec.(*api.AppSpec)
	kind, v := s.Availability.Budget()
	val := intstr.Parse(v)
	spec := policyv1.PodDisruptionBudgetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: selector(w)},
		// Pods not ready yet never hold a drain back.
		UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
	}
	if kind == "minAvailable" {
		spec.MinAvailable = &val
	} else {
		spec.MaxUnavailable = &val
	}
	m := meta(w, sh)
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels},
		Spec:       spec,
	}
}

// applyBudget applies the PodDisruptionBudget of key's shard here, for
// an App; other kinds have none.
func (t *target) applyBudget(ctx context.Context, d *desired, ns string) error {
	w := d.workload
	sh := d.shard(t.name)
	if w == nil || w.Kind != api.KindApp || sh == nil {
		return nil
	}
	b := renderBudget(w, *sh)
	body, err := json.Marshal(b)
	if err != nil {
		return err
	}
	err = t.call(func() error {
		_, err := t.dyn.Resource(pdbs).Namespace(ns).Patch(ctx, b.Name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
		return err
	})
	if err != nil {
		return fmt.Errorf("apply poddisruptionbudget %s/%s: %w", ns, b.Name, err)
	}
	return nil
}

// removeBudget deletes an App shard's PodDisruptionBudget.
func (t *target) removeBudget(ctx context.Context, kind, ns, name string) error {
	if kind != api.KindApp {
		return nil
	}
	return t.delete(ctx, pdbs, ns, name)
}
