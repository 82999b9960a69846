package propagator

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// TestPodVolume: a Pod with a volume mounts its shard's claim into every
// main container (not the sidecars), and the claim asks for the size and
// class (an empty class kept as empty); without a volume there is neither.
func TestPodVolume(t *testing.T) {
	w := workload(api.KindPod, api.Control{})
	s := w.Spec.(*api.PodSpec)
	s.Template.Sidecars = []api.Container{{Name: "shipper", Image: "shipper:1"}}
	sh := api.Shard{Cluster: "zone-b", Zone: "b", Replicas: 1}

	p := renderPod(w, sh).obj.(*corev1.Pod)
	for _, v := range p.Spec.Volumes {
		assert.NotEqual(t, api.PodVolumeName, v.Name, "a volume without spec.volume")
	}
	assert.Nil(t, renderPodClaim(w, sh))

	s.Volume = &api.PodVolume{Size: "2Gi", StorageClassName: ptr.To(""), MountPath: "/data"}
	p = renderPod(w, sh).obj.(*corev1.Pod)
	require.Contains(t, p.Spec.Volumes, corev1.Volume{Name: api.PodVolumeName, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "w-data-zone-b"}}})
	for _, c := range p.Spec.Containers {
		assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: api.PodVolumeName, MountPath: "/data"}, c.Name)
	}
	require.Len(t, p.Spec.InitContainers, 1)
	assert.Empty(t, p.Spec.InitContainers[0].VolumeMounts, "the sidecar mounts the volume")
	assert.Equal(t, ptr.To(corev1.ContainerRestartPolicyAlways), p.Spec.InitContainers[0].RestartPolicy, "the sidecar is not native")

	c := renderPodClaim(w, sh)
	require.NotNil(t, c)
	assert.Equal(t, "w-data-zone-b", c.Name)
	assert.Equal(t, api.Namespace("p"), c.Namespace)
	assert.Equal(t, ptr.To(""), c.Spec.StorageClassName)
	assert.Equal(t, "2Gi", ptr.To(c.Spec.Resources.Requests[corev1.ResourceStorage]).String())
	assert.Equal(t, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, c.Spec.AccessModes)
	assert.Equal(t, "w", c.Labels[api.LabelWorkload], "the aggregator finds the claim by its labels")
	assert.Equal(t, "zone-b", c.Labels[api.LabelShard])

	s.Volume.StorageClassName = nil
	assert.Nil(t, renderPodClaim(w, sh).Spec.StorageClassName, "no class: the cluster's default")
}

// TestPodImageChangeOnlyChangesImages: what an image-only template change
// renders differs from the old render in the images alone, which the API
// server takes on a live Pod (the in-place update); the hash changes so
// the shard is applied.
func TestPodImageChangeOnlyChangesImages(t *testing.T) {
	sh := api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 1}
	w := workload(api.KindPod, api.Control{})
	w.Spec.(*api.PodSpec).Template.Sidecars = []api.Container{{Name: "shipper", Image: "shipper:1"}}
	before := renderPod(w, sh)
	stamp(&before)
	w.Spec.(*api.PodSpec).Template.Containers[1].Image = "envoy:2"
	w.Spec.(*api.PodSpec).Template.Sidecars[0].Image = "shipper:2"
	after := renderPod(w, sh)
	stamp(&after)
	assert.NotEqual(t, before.hash, after.hash)
	b, a := before.obj.(*corev1.Pod).DeepCopy(), after.obj.(*corev1.Pod).DeepCopy()
	assert.Equal(t, "envoy:2", a.Spec.Containers[1].Image)
	assert.Equal(t, "shipper:2", a.Spec.InitContainers[0].Image)
	a.Spec.Containers[1].Image, a.Spec.InitContainers[0].Image = b.Spec.Containers[1].Image, b.Spec.InitContainers[0].Image
	assert.Equal(t, b.Spec, a.Spec, "more than the images changed")
}
