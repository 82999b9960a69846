package propagator

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// The stateful App: an App whose template has claim templates
// (api.VolumeClaimTemplate) is a StatefulSet per shard instead of a
// Deployment, of the same name. Its ordinals start at the zone's
// api.OrdinalStart, so a replica's ordinal (its pod name), its claims
// (named by the StatefulSet after the ordinal) and its zone stay together
// across restarts and scale. Scaling down keeps the claims of the removed
// ordinals (scaling back up finds the data); deleting the shard deletes
// them. The budget, Service and Ingress beside it are the Deployment
// form's. An App that gains or loses its claim templates changes form:
// the other form's object is deleted before the new one is applied.

var statefulsets = appsv1.SchemeGroupVersion.WithResource("statefulsets")

// stateful reports whether an App is rendered as StatefulSets.
func stateful(w *api.Workload) bool {
	s, ok := w.Spec.(*api.AppSpec)
	return ok && len(s.Template.VolumeClaimTemplates) > 0
}

// forms implements multiForm: an App's main object is a Deployment or a
// StatefulSet.
func (appKind) forms() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{statefulsets}
}

// dropOtherForm deletes the shard's main object of the form w is not
// rendered as.
func (t *target) dropOtherForm(ctx context.Context, w *api.Workload, ns string) error {
	other := statefulsets
	if stateful(w) {
		other = deployments
	}
	if !t.liveIn(api.KindApp, other, ns, w.Metadata.Name) {
		return nil
	}
	return t.delete(ctx, other, ns, w.Metadata.Name)
}

// renderStatefulApp makes a stateful App shard's StatefulSet.
func renderStatefulApp(w *api.Workload, sh api.Shard, m metav1.ObjectMeta, replicas int32) object {
	s := w.Spec.(*api.AppSpec)
	var claims []corev1.PersistentVolumeClaim
	for _, c := range s.Template.VolumeClaimTemplates {
		claims = append(claims, renderClaimTemplate(w, sh, c))
	}
	ss := &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: m,
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			Ordinals:            &appsv1.StatefulSetOrdinals{Start: api.OrdinalStart(sh.Zone)},
			Selector:            &metav1.LabelSelector{MatchLabels: selector(w)},
			Template:            podTemplate(w, sh, corev1.RestartPolicyAlways),
			ServiceName:         m.Name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			// A replica scaled away keeps its data for its return; the
			// shard's deletion deletes it.
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			VolumeClaimTemplates: claims,
		},
	}
	return object{gvr: statefulsets, name: ss.Name, obj: ss}
}

// renderClaimTemplate makes one claim template of a StatefulSet.
func renderClaimTemplate(w *api.Workload, sh api.Shard, c api.VolumeClaimTemplate) corev1.PersistentVolumeClaim {
	pvc := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Labels: labels(w, sh)},
		Spec: corev1.PersistentVolumeClaimSpec{
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{}},
		},
	}
	if q, err := resource.ParseQuantity(c.Storage); err == nil {
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = q
	}
	if c.StorageClass != "" {
		pvc.Spec.StorageClassName = ptr.To(c.StorageClass)
	}
	for _, m := range c.AccessModes {
		pvc.Spec.AccessModes = append(pvc.Spec.AccessModes, corev1.PersistentVolumeAccessMode(m))
	}
	return pvc
}

// invalid answers a refused apply of an App's main object: a StatefulSet
// whose claim templates (immutable in Kubernetes) changed is deleted
// orphaning its pods and claims, and created anew on the retry, which
// adopts both; changed claim templates apply to claims made from then on
// (a claim is never resized or replaced). Anything else is an error.
func (appKind) invalid(ctx context.Context, t *target, o object, ns string, err error) error {
	if o.gvr != statefulsets {
		return basic{}.invalid(ctx, t, o, ns, err)
	}
	t.log.Info("replacing statefulset: its claim templates changed", "namespace", ns, "name", o.name, "err", err)
	derr := t.call(func() error {
		err := t.dyn.Resource(statefulsets).Namespace(ns).Delete(ctx, o.name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if derr != nil {
		return fmt.Errorf("delete statefulset %s/%s: %w", ns, o.name, derr)
	}
	return fmt.Errorf("statefulset %s/%s deleted, its pods and claims kept, for a change it cannot take in place (%w): %w", ns, o.name, err, errReplacing)
}
