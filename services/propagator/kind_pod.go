package propagator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"atoll.dev/libs/api"
)

// A Pod workload (api.KindPod) is one Pod, applied like every shard with
// server-side apply. What the API server accepts on a live Pod is the
// rule for what changes in place: a change of only container, init
// container or sidecar images (and labels and annotations) is patched
// into the live Pod, which keeps its UID, and the kubelet restarts only
// the containers whose image changed. Any other template change is
// refused by the API server as Invalid (a Pod's spec is otherwise
// immutable); the target then replaces the Pod, as it does for a restart
// (replaceRestartedPod): it deletes it and creates it anew once it is
// gone.
//
// A Pod's optional volume (api.PodVolume) is a PersistentVolumeClaim in
// the Pod's cluster, named api.PodClaimName(pod, cluster), created before
// the Pod and never updated (a claim's request cannot shrink, and a
// class cannot change); it is deleted with the shard, so a cluster that
// comes back after a failover loses its stale Pod and claim together (the
// data policy is stated in libs/api/pod.go).

var (
	pods   = corev1.SchemeGroupVersion.WithResource("pods")
	claims = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
)

// podKind is the Pod's part of the propagator.
type podKind struct{ basic }

func (podKind) resource() schema.GroupVersionResource { return pods }

func (podKind) render(d *desired, sh api.Shard) object { return renderPod(d.workload, sh) }

func (podKind) create(ctx context.Context, _ *term, cs kubernetes.Interface, ns string, obj any, o metav1.CreateOptions) error {
	_, err := cs.CoreV1().Pods(ns).Create(ctx, obj.(*corev1.Pod), o)
	return err
}

// before creates the shard's claim: the Pod mounts it.
func (podKind) before(ctx context.Context, t *target, w *api.Workload, sh api.Shard, ns string) error {
	return t.ensurePodClaim(ctx, w, sh, ns)
}

// prepare replaces a Pod whose restart annotations changed.
func (podKind) prepare(ctx context.Context, t *target, o object, ns string) error {
	return t.replaceRestartedPod(ctx, o, ns)
}

func (podKind) invalid(ctx context.Context, t *target, o object, ns string, err error) error {
	return t.replaceInvalidPod(ctx, o, ns, err)
}

func (podKind) owned(cluster, name string) []owned {
	return []owned{{pods, name}, {claims, api.PodClaimName(name, cluster)}}
}

// renderPod makes the Pod of a Pod workload. Its restart annotations are
// on the Pod itself; a Pod cannot be restarted in place, so the target
// replaces it when they change (see replaceRestartedPod).
func renderPod(w *api.Workload, sh api.Shard) object {
	t := podTemplate(w, sh, corev1.RestartPolicyAlways)
	m := meta(w, sh)
	for k, v := range t.Labels {
		m.Labels[k] = v
	}
	for k, v := range t.Annotations {
		m.Annotations[k] = v
	}
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: m, Spec: t.Spec}
	mountPodVolume(w, sh, &p.Spec)
	return object{gvr: pods, name: p.Name, obj: p}
}

// mountPodVolume adds a Pod workload's volume to spec: the claim of its
// shard, mounted into every main container.
func mountPodVolume(w *api.Workload, sh api.Shard, spec *corev1.PodSpec) {
	s, ok := w.Spec.(*api.PodSpec)
	if !ok || s.Volume == nil {
		return
	}
	spec.Volumes = append(spec.Volumes, corev1.Volume{
		Name: api.PodVolumeName,
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
			ClaimName: api.PodClaimName(w.Metadata.Name, sh.Cluster),
		}},
	})
	for i := range spec.Containers {
		spec.Containers[i].VolumeMounts = append(spec.Containers[i].VolumeMounts,
			corev1.VolumeMount{Name: api.PodVolumeName, MountPath: s.Volume.MountPath})
	}
}

// renderPodClaim makes the claim of a Pod workload's shard, nil when it
// has no volume.
func renderPodClaim(w *api.Workload, sh api.Shard) *corev1.PersistentVolumeClaim {
	s, ok := w.Spec.(*api.PodSpec)
	if !ok || s.Volume == nil {
		return nil
	}
	size, err := resource.ParseQuantity(s.Volume.Size)
	if err != nil {
		return nil // admission validated it
	}
	m := meta(w, sh)
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: api.PodClaimName(w.Metadata.Name, sh.Cluster), Namespace: m.Namespace,
			Labels: m.Labels, Annotations: m.Annotations,
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: s.Volume.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}

// ensurePodClaim creates the claim of a Pod workload's shard here when it
// has a volume and the claim does not exist yet.
func (t *target) ensurePodClaim(ctx context.Context, w *api.Workload, sh api.Shard, ns string) error {
	c := renderPodClaim(w, sh)
	if c == nil {
		return nil
	}
	err := t.call(func() error {
		_, err := t.cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create persistentvolumeclaim %s/%s: %w", ns, c.Name, err)
	}
	return nil
}

// replaceInvalidPod deletes a live Pod whose apply the API server refused
// as Invalid (applyErr): the change is not one a Pod takes in place. It
// returns an error wrapping errReplacing, so the key is retried and the
// Pod created anew once the old one is gone.
func (t *target) replaceInvalidPod(ctx context.Context, o object, ns string, applyErr error) error {
	t.log.Info("replacing pod: its change cannot be applied in place", "namespace", ns, "name", o.name, "err", applyErr)
	if err := t.delete(ctx, pods, ns, o.name); err != nil {
		return err
	}
	return fmt.Errorf("pod %s/%s deleted for a change it cannot take in place (%w): %w", ns, o.name, applyErr, errReplacing)
}

// errReplacing says a Pod is being replaced; the key is retried until the
// old Pod is gone and the new one can be created.
var errReplacing = errors.New("replacing the pod")

// replaceRestartedPod deletes the live Pod when its restart annotations
// differ from o's: a Pod's containers cannot be restarted in place, so a
// restart replaces the Pod. While the old Pod goes it returns an error
// wrapping errReplacing, so the key is retried and the Pod created anew.
func (t *target) replaceRestartedPod(ctx context.Context, o object, ns string) error {
	var live *corev1.Pod
	err := t.call(func() error {
		p, err := t.cs.CoreV1().Pods(ns).Get(ctx, o.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		live = p
		return err
	})
	if err != nil {
		return fmt.Errorf("read pod %s/%s: %w", ns, o.name, err)
	}
	if live == nil {
		return nil
	}
	if live.DeletionTimestamp != nil {
		return fmt.Errorf("pod %s/%s is terminating: %w", ns, o.name, errReplacing)
	}
	want := o.obj.(*corev1.Pod).Annotations
	if maps.Equal(restartAnnotations(live.Annotations), restartAnnotations(want)) {
		return nil
	}
	t.log.Info("restarting pod", "namespace", ns, "name", o.name)
	if err := t.delete(ctx, pods, ns, o.name); err != nil {
		return err
	}
	return fmt.Errorf("pod %s/%s deleted for a restart: %w", ns, o.name, errReplacing)
}

// restartAnnotations picks the annotations that carry restarts.
func restartAnnotations(a map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		if k == api.AnnoRestartedAt || strings.HasPrefix(k, api.AnnoRestartPrefix) {
			out[k] = v
		}
	}
	return out
}
