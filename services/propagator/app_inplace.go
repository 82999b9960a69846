package propagator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// An App with api.UpdateInPlaceIfPossible takes a change of only its
// containers' images into its live pods (api/inplace.go). Its rollout is
// unchanged: the zone-by-zone rollout gives a zone the new template, and
// the propagator applies the zone's Deployment; appKind.prepare runs
// first, and when the Deployment's template, as the API server defaults
// it, differs from the live one in images only, it moves the shard in
// place before the apply, so that the Deployment controller finds its
// current ReplicaSet already on the new template and starts no rollout:
//
//  1. pause the Deployment (its controller then creates no ReplicaSet,
//     whatever the templates say), marked by AnnoInPlacePaused and with
//     a spec hash no render has, so a crash before step 5 brings the key
//     back;
//  2. give the current ReplicaSet (the one with pods; none when a
//     rollout is under way, which then rolls as usual) the new template,
//     keeping its pod-template-hash label (the Deployment controller
//     matches templates ignoring it), and delete any old ReplicaSet
//     without pods whose template is the new one (the controller would
//     pick the oldest match and roll to it);
//  3. patch each of its pods' changed images (imagePatch): the kubelet
//     restarts only those containers, and the pod's api.AnnoTemplate says
//     the new revision (the aggregator counts pods per revision). At most
//     the Deployment's maxUnavailable (the App's availability budget,
//     rollingUpdate) are on the way at once: a pod is on the way from
//     its patch until it is ready with its containers on the new images;
//     while pods are left, the key is retried (errInPlaceBatch);
//  4. apply the Deployment with the new template, still paused;
//  5. resume it; the ordinary apply then writes the spec hash.
//
// Any other change is applied as usual and replaces the pods.

// AnnoUpdateStrategy on an App's Deployment is its update strategy when
// it is not the default (the rendered Deployment of an App with
// InPlaceIfPossible carries it, so a strategy change is a new hash).
const AnnoUpdateStrategy = "atoll.dev/update-strategy"

// AnnoInPlacePaused on a Deployment says the in-place update paused it
// (step 1), and resumes it.
const AnnoInPlacePaused = "atoll.dev/in-place-paused"

// inPlacePending is the spec hash of a Deployment in the middle of an
// in-place update: no render has it.
const inPlacePending = "in-place"

// podTemplateHash is the label the Deployment controller puts on its
// ReplicaSets and their pods.
const podTemplateHash = appsv1.DefaultDeploymentUniqueLabelKey

var replicaSets = appsv1.SchemeGroupVersion.WithResource("replicasets")

// updateAppInPlace is steps 1 to 5 for the Deployment o, a no-op unless
// its App is InPlaceIfPossible and its template changed in images only.
func (t *target) updateAppInPlace(ctx context.Context, o object, ns string) error {
	want, ok := o.obj.(*appsv1.Deployment)
	if !ok || want.Annotations[AnnoUpdateStrategy] != api.UpdateInPlaceIfPossible {
		return nil
	}
	if a, ok := t.cachedAnnotations(ns, o.name); ok &&
		a[api.AnnoTemplate] == want.Annotations[api.AnnoTemplate] && a[AnnoInPlacePaused] == "" {
		return nil // the same template: nothing moves in place
	}
	live, err := t.cs.AppsV1().Deployments(ns).Get(ctx, o.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read deployment %s/%s: %w", ns, o.name, err)
	}
	mine := live.Annotations[AnnoInPlacePaused] != ""
	next, err := t.defaultedTemplate(ctx, o, ns)
	if err != nil {
		return err
	}
	rs, err := t.currentReplicaSet(ctx, live)
	if err != nil {
		return err
	}
	switch {
	case rs == nil || !imagesOnly(&rs.Spec.Template, next) || !imagesOnly(&live.Spec.Template, next):
		// Not in place: the apply rolls the pods (resumed, if this paused it).
		if mine {
			return t.resumeInPlace(ctx, ns, o.name)
		}
		return nil
	case !mine && apiequality.Semantic.DeepEqual(withoutHash(&live.Spec.Template), withoutHash(next)):
		return nil // no change of the template
	}
	t.log.Info("updating app in place", "namespace", ns, "name", o.name, "replicaset", rs.Name, "template", want.Annotations[api.AnnoTemplate])
	if !live.Spec.Paused || mine {
		if err := t.pauseInPlace(ctx, ns, o.name); err != nil {
			return err
		}
		mine = true
	}
	if err := t.moveReplicaSet(ctx, live, rs, next); err != nil {
		return err
	}
	if err := t.patchReplicaSetPods(ctx, live, rs, next); err != nil {
		return err
	}
	pending := *want
	pending.Annotations = maps.Clone(want.Annotations)
	pending.Annotations[AnnoSpecHash] = inPlacePending
	if err := t.applyBeside(ctx, deployments, "deployment", ns, o.name, &pending); err != nil {
		return err
	}
	if mine {
		return t.resumeInPlace(ctx, ns, o.name)
	}
	return nil
}

// cachedAnnotations returns the annotations of the App Deployment ns/name
// in the informer cache.
func (t *target) cachedAnnotations(ns, name string) (map[string]string, bool) {
	inf := t.informers[api.KindApp]
	if inf == nil {
		return nil, false
	}
	obj, ok, err := inf.GetIndexer().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, false
	}
	return m.GetAnnotations(), true
}

// defaultedTemplate returns o's pod template as the API server stores it
// (defaults filled in), by a dry run of its apply.
func (t *target) defaultedTemplate(ctx context.Context, o object, ns string) (*corev1.PodTemplateSpec, error) {
	body, err := json.Marshal(o.obj)
	if err != nil {
		return nil, err
	}
	var d appsv1.Deployment
	err = t.call(func() error {
		out, err := t.dyn.Resource(deployments).Namespace(ns).Patch(ctx, o.name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true), DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		return runtime.DefaultUnstructuredConverter.FromUnstructured(out.Object, &d)
	})
	if err != nil {
		return nil, fmt.Errorf("dry-run apply deployment %s/%s: %w", ns, o.name, err)
	}
	return &d.Spec.Template, nil
}

// currentReplicaSet returns the Deployment's one ReplicaSet with pods
// wanted or left; nil when there is none or more than one (a rollout is
// under way).
func (t *target) currentReplicaSet(ctx context.Context, d *appsv1.Deployment) (*appsv1.ReplicaSet, error) {
	var list *appsv1.ReplicaSetList
	err := t.call(func() error {
		var err error
		list, err = t.cs.AppsV1().ReplicaSets(d.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: klabels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list replicasets of %s/%s: %w", d.Namespace, d.Name, err)
	}
	var cur *appsv1.ReplicaSet
	for i := range list.Items {
		rs := &list.Items[i]
		if !metav1.IsControlledBy(rs, d) || ptr.Deref(rs.Spec.Replicas, 0) == 0 && rs.Status.Replicas == 0 {
			continue
		}
		if cur != nil {
			return nil, nil
		}
		cur = rs
	}
	return cur, nil
}

// imagesOnly reports whether template a becomes b by a change of
// container images and of its api.AnnoTemplate (nothing else).
func imagesOnly(a, b *corev1.PodTemplateSpec) bool {
	moved := withoutHash(a)
	moved.Spec = withImages(moved.Spec, &b.Spec)
	if v, ok := b.Annotations[api.AnnoTemplate]; ok {
		moved.Annotations = maps.Clone(moved.Annotations)
		if moved.Annotations == nil {
			moved.Annotations = map[string]string{}
		}
		moved.Annotations[api.AnnoTemplate] = v
	}
	return apiequality.Semantic.DeepEqual(moved, withoutHash(b))
}

// withoutHash returns a copy of a pod template without the Deployment
// controller's pod-template-hash label.
func withoutHash(t *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	c := t.DeepCopy()
	delete(c.Labels, podTemplateHash)
	if len(c.Labels) == 0 {
		c.Labels = nil
	}
	return c
}

// pauseInPlace is step 1.
func (t *target) pauseInPlace(ctx context.Context, ns, name string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true",%q:%q}},"spec":{"paused":true}}`,
		AnnoInPlacePaused, AnnoSpecHash, inPlacePending)
	return t.patchDeployment(ctx, ns, name, patch, "pause")
}

// resumeInPlace is step 5.
func (t *target) resumeInPlace(ctx context.Context, ns, name string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}},"spec":{"paused":false}}`, AnnoInPlacePaused)
	return t.patchDeployment(ctx, ns, name, patch, "resume")
}

func (t *target) patchDeployment(ctx context.Context, ns, name string, patch []byte, what string) error {
	err := t.call(func() error {
		_, err := t.cs.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: InPlaceManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("%s deployment %s/%s for an in-place update: %w", what, ns, name, err)
	}
	return nil
}

// moveReplicaSet is step 2: rs gets the template next (with its own
// pod-template-hash), and old ReplicaSets without pods that have next
// go.
func (t *target) moveReplicaSet(ctx context.Context, d *appsv1.Deployment, rs *appsv1.ReplicaSet, next *corev1.PodTemplateSpec) error {
	var list *appsv1.ReplicaSetList
	err := t.call(func() error {
		var err error
		list, err = t.cs.AppsV1().ReplicaSets(d.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: klabels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()})
		return err
	})
	if err != nil {
		return fmt.Errorf("list replicasets of %s/%s: %w", d.Namespace, d.Name, err)
	}
	for i := range list.Items {
		old := &list.Items[i]
		if old.UID == rs.UID || !metav1.IsControlledBy(old, d) ||
			!apiequality.Semantic.DeepEqual(withoutHash(&old.Spec.Template), withoutHash(next)) {
			continue
		}
		if err := t.delete(ctx, replicaSets, old.Namespace, old.Name); err != nil {
			return err
		}
	}
	tmpl := next.DeepCopy()
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[podTemplateHash] = rs.Labels[podTemplateHash]
	if apiequality.Semantic.DeepEqual(&rs.Spec.Template, tmpl) {
		return nil
	}
	up := rs.DeepCopy()
	up.Spec.Template = *tmpl
	// Its controllers write its status and annotations meanwhile: on a
	// conflict, read it again and retry at once.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		return t.call(func() error {
			_, err := t.cs.AppsV1().ReplicaSets(up.Namespace).Update(ctx, up, metav1.UpdateOptions{FieldManager: InPlaceManager})
			if !apierrors.IsConflict(err) {
				return err
			}
			cur, gerr := t.cs.AppsV1().ReplicaSets(up.Namespace).Get(ctx, up.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			up = cur.DeepCopy()
			up.Spec.Template = *tmpl
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("update replicaset %s/%s in place: %w", up.Namespace, up.Name, err)
	}
	return nil
}

// errInPlaceBatch says pods of an in-place update wait for the budget:
// the key is retried until every pod was patched.
var errInPlaceBatch = errors.New("pods wait for the availability budget")

// patchReplicaSetPods is step 3: the live pods of rs get next's images
// and revision, at most d's maxUnavailable on the way at once.
func (t *target) patchReplicaSetPods(ctx context.Context, d *appsv1.Deployment, rs *appsv1.ReplicaSet, next *corev1.PodTemplateSpec) error {
	var list *corev1.PodList
	err := t.call(func() error {
		var err error
		list, err = t.cs.CoreV1().Pods(rs.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: klabels.SelectorFromSet(rs.Spec.Selector.MatchLabels).String()})
		return err
	})
	if err != nil {
		return fmt.Errorf("list pods of %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	annos := map[string]string{}
	if v, ok := next.Annotations[api.AnnoTemplate]; ok {
		annos[api.AnnoTemplate] = v
	}
	type todo struct {
		pod   *corev1.Pod
		patch []byte
	}
	var left []todo
	busy := 0
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil || !metav1.IsControlledBy(p, rs) {
			continue
		}
		if patch := imagePatch(p, &next.Spec, annos); patch != nil {
			left = append(left, todo{p, patch})
		} else if !settled(p) {
			busy++
		}
	}
	n := max(0, inPlaceBudget(d)-busy)
	for i, tp := range left {
		if i == n {
			return fmt.Errorf("%d pods of %s/%s to update in place, %d on the way: %w", len(left)-n, rs.Namespace, rs.Name, busy+n, errInPlaceBatch)
		}
		if err := t.patchPod(ctx, tp.pod.Namespace, tp.pod.Name, tp.patch); err != nil {
			return err
		}
	}
	return nil
}

// inPlaceBudget is how many of d's pods may be on the way at once: its
// rolling update's maxUnavailable (rounded down, as the Deployment
// controller does), at least one.
func inPlaceBudget(d *appsv1.Deployment) int {
	replicas := int(ptr.Deref(d.Spec.Replicas, 1))
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil || ru.MaxUnavailable == nil {
		return max(1, replicas/4)
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, replicas, false)
	if err != nil {
		return 1
	}
	return max(1, n)
}

// settled reports whether a pod is done with its last in-place update:
// ready, and its kubelet has seen its spec (status.observedGeneration) or,
// where the kubelet does not say (KWOK), its containers report the spec's
// images.
func settled(p *corev1.Pod) bool {
	ready := false
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return false
	}
	if p.Status.ObservedGeneration != 0 {
		return p.Status.ObservedGeneration >= p.Generation
	}
	images := map[string]string{}
	for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		images[s.Name] = s.Image
	}
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		if img, ok := images[c.Name]; ok && img != c.Image {
			return false
		}
	}
	return true
}

// annotated returns a copy of m with annos set.
func annotated(m, annos map[string]string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, annos)
	return out
}
