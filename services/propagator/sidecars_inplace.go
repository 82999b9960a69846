package propagator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A change of only the managed sidecars' images (a new version of the
// platform's sidecars, admission's sidecar rollout) is patched into an
// App's live pods instead of replacing them: each pod keeps its UID and
// only the sidecar restarts. Each App Deployment carries the hash of its
// pod template with the sidecars' images left out (AnnoPodShape); when
// the live Deployment's equals the desired one's and the sidecar images
// differ, the shard is moved in place before the Deployment is applied
// (appKind.prepare):
//
//  1. the Deployment is paused, so its controller creates no ReplicaSet
//     while the current one's template and the Deployment's differ (and
//     nothing more happens until the controller has observed the pause);
//  2. the current ReplicaSet's template gets the new images (pods it
//     creates from now on run them);
//  3. the pods are patched, at most the shard's maxUnavailable at a time:
//     a pod counts as in progress until it is ready and its status
//     reports the new image; while any pod is left the key is retried
//     (errInPlace);
//  4. then the Deployment is applied as usual, unpaused, with the new
//     template, which equals the ReplicaSet's but for its hash label: the
//     controller adopts that ReplicaSet as the new one and replaces
//     nothing.
//
// Any other change (resources, a sidecar added or removed, the user's
// containers) changes AnnoPodShape and rolls the pods as before, within
// the App's availability budget.

// AnnoPodShape on an App Deployment is the hash of its pod template with
// the managed sidecars' images left out.
const AnnoPodShape = "atoll.dev/pod-shape"

// errInPlace says a shard's pods are being patched in place; the key is
// retried until every pod runs the new images.
var errInPlace = errors.New("patching the pods in place")

// isSidecar says whether c is a native sidecar: the managed sidecars are
// rendered as init containers with restartPolicy Always.
func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// podShape hashes t with its sidecars' images left out.
func podShape(t *corev1.PodTemplateSpec) string {
	c := t.DeepCopy()
	for i := range c.Spec.InitContainers {
		if isSidecar(&c.Spec.InitContainers[i]) {
			c.Spec.InitContainers[i].Image = ""
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// sidecarImages maps each sidecar of spec to its image.
func sidecarImages(spec *corev1.PodSpec) map[string]string {
	out := map[string]string{}
	for i := range spec.InitContainers {
		if c := &spec.InitContainers[i]; isSidecar(c) {
			out[c.Name] = c.Image
		}
	}
	return out
}

// updateSidecarsInPlace moves the live shard of o to its new sidecar
// images in place when that is all that changed (see above); nil when
// there is nothing to do in place, or once it is done.
func (t *target) updateSidecarsInPlace(ctx context.Context, o object, ns string) error {
	want, ok := o.obj.(*appsv1.Deployment)
	if !ok {
		// A stateful App's StatefulSet (kind_app_stateful.go) replaces
		// its pods one at a time, as for any other change.
		return nil
	}
	var live *appsv1.Deployment
	err := t.call(func() error {
		d, err := t.cs.AppsV1().Deployments(ns).Get(ctx, o.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		live = d
		return err
	})
	if err != nil {
		return fmt.Errorf("read deployment %s/%s: %w", ns, o.name, err)
	}
	images := sidecarImages(&want.Spec.Template.Spec)
	// A Deployment paused while its App is not was paused by a move in
	// place that has not finished: its ReplicaSet and pods may run other
	// images than its template (a move to a version whose sidecar never
	// became ready, then rolled back to the template's). That move goes
	// on to the desired images, in place; applying the Deployment
	// instead would make its controller replace every pod, the current
	// ReplicaSet's template no longer being the Deployment's.
	interrupted := live != nil && live.Spec.Paused && !want.Spec.Paused
	if live == nil || live.Annotations[AnnoPodShape] == "" || live.Annotations[AnnoPodShape] != want.Annotations[AnnoPodShape] ||
		(maps.Equal(sidecarImages(&live.Spec.Template.Spec), images) && !interrupted) {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(live.Spec.Selector)
	if err != nil {
		return fmt.Errorf("selector of deployment %s/%s: %w", ns, o.name, err)
	}
	list := metav1.ListOptions{LabelSelector: sel.String()}

	// 1. Pause the Deployment, and wait until its controller has seen
	// the pause: its informers order no event of a ReplicaSet after one
	// of a Deployment, so a ReplicaSet changed before it saw the pause
	// would make it create one with the old template.
	if !live.Spec.Paused {
		if err := t.call(func() error {
			_, err := t.cs.AppsV1().Deployments(ns).Patch(ctx, o.name, types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{FieldManager: FieldManager})
			return err
		}); err != nil {
			return fmt.Errorf("pause deployment %s/%s: %w", ns, o.name, err)
		}
		return fmt.Errorf("deployment %s/%s paused: %w", ns, o.name, errInPlace)
	}
	if live.Status.ObservedGeneration < live.Generation {
		return fmt.Errorf("deployment %s/%s: waiting for its controller to see the pause: %w", ns, o.name, errInPlace)
	}
	// 2. The current ReplicaSet's template.
	var sets *appsv1.ReplicaSetList
	if err := t.call(func() error {
		var err error
		sets, err = t.cs.AppsV1().ReplicaSets(ns).List(ctx, list)
		return err
	}); err != nil {
		return fmt.Errorf("list replicasets of %s/%s: %w", ns, o.name, err)
	}
	const revision = "deployment.kubernetes.io/revision"
	for i := range sets.Items {
		rs := &sets.Items[i]
		if rs.Annotations[revision] != live.Annotations[revision] || maps.Equal(sidecarImages(&rs.Spec.Template.Spec), images) {
			continue
		}
		if err := t.patchTemplateImages(ctx, ns, rs.Name, images); err != nil {
			return err
		}
	}
	// 3. The pods, within the budget.
	var pods *corev1.PodList
	if err := t.call(func() error {
		var err error
		pods, err = t.cs.CoreV1().Pods(ns).List(ctx, list)
		return err
	}); err != nil {
		return fmt.Errorf("list pods of %s/%s: %w", ns, o.name, err)
	}
	var todo []*corev1.Pod
	busy := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case p.DeletionTimestamp != nil:
		case !maps.Equal(sidecarImages(&p.Spec), images):
			todo = append(todo, p)
		case !runsImages(p, true, images) || !podReady(p):
			busy++
		}
	}
	if len(todo) == 0 && busy == 0 {
		t.log.Info("sidecars updated in place", "namespace", ns, "name", o.name, "pods", len(pods.Items))
		return nil // 4. the apply
	}
	slices.SortFunc(todo, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	n := min(len(todo), max(0, inPlaceBudget(want)-busy))
	sidecars := &corev1.PodSpec{}
	for name, image := range images {
		sidecars.InitContainers = append(sidecars.InitContainers, corev1.Container{Name: name, Image: image})
	}
	for _, p := range todo[:n] {
		if err := t.patchPod(ctx, ns, p.Name, imagePatch(p, sidecars, nil)); err != nil { // inplace.go
			return err
		}
	}
	return fmt.Errorf("deployment %s/%s: %d pods patched, %d updating, %d left: %w", ns, o.name, n, busy, len(todo)-n, errInPlace)
}

// patchTemplateImages sets the sidecar images of a ReplicaSet's template.
func (t *target) patchTemplateImages(ctx context.Context, ns, name string, images map[string]string) error {
	var cs []map[string]string
	for n, image := range images {
		cs = append(cs, map[string]string{"name": n, "image": image})
	}
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"initContainers": cs}}}})
	if err != nil {
		return err
	}
	if err := t.call(func() error {
		_, err := t.cs.AppsV1().ReplicaSets(ns).Patch(ctx, name, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager})
		return err
	}); err != nil {
		return fmt.Errorf("patch replicaset %s/%s: %w", ns, name, err)
	}
	return nil
}

// inPlaceBudget (app_inplace.go) bounds the pods updating at once.

// podReady says whether p's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
