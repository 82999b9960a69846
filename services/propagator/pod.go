package propagator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

var claims = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")

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
func (t *target) ensurePodClaim(ctx context.Context, d *desired, ns string) error {
	sh := d.shard(t.name)
	if d.workload == nil || sh == nil {
		return nil
	}
	c := renderPodClaim(d.workload, *sh)
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

// removePodClaim deletes the claim of a Pod workload's shard here (none
// is fine).
func (t *target) removePodClaim(ctx context.Context, kind, ns, name string) error {
	if kind != api.KindPod {
		return nil
	}
	return t.delete(ctx, claims, ns, api.PodClaimName(name, t.name))
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
	return fmt.Errorf("pod %s/%s deleted for a change it cannot take in place (%v): %w", ns, o.name, applyErr, errReplacing)
}
