package aggregator

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

func livePod() *corev1.Pod {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db", UID: "u-1"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{
				{Name: "setup", Image: "setup:1"},
				{Name: "shipper", Image: "shipper:2", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
			},
			Containers: []corev1.Container{{Name: "app", Image: "app:2"}, {Name: "helper", Image: "helper:1"}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "setup", Image: "setup:1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}},
				// The kubelet has restarted it with the new image.
				{Name: "shipper", Image: "shipper:2", RestartCount: 1, Ready: true, State: running},
			},
			ContainerStatuses: []corev1.ContainerStatus{
				// Not restarted yet: the status still says the old image.
				{Name: "app", Image: "app:1", Ready: true, State: running},
				{Name: "helper", Image: "helper:1", Ready: true, State: running},
			},
		},
	}
}

// TestPodObserved: a Pod's containers are reported in order (init,
// sidecar, main) with the image the status says runs, restart counts and
// states; the claim with its phase and capacity.
func TestPodObserved(t *testing.T) {
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "db-data-zone-a"},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: "pv-1"},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
	o := podObserved(viewOf(livePod()), claim)
	require.NotNil(t, o)
	assert.Equal(t, "u-1", o.UID)
	assert.Equal(t, []api.ContainerStatus{
		{Name: "setup", Type: api.ContainerInit, Image: "setup:1", State: "Terminated (Completed)"},
		{Name: "shipper", Type: api.ContainerSidecar, Image: "shipper:2", RestartCount: 1, Ready: true, State: "Running"},
		{Name: "app", Type: api.ContainerMain, Image: "app:1", Ready: true, State: "Running"},
		{Name: "helper", Type: api.ContainerMain, Image: "helper:1", Ready: true, State: "Running"},
	}, o.Containers)
	assert.Equal(t, &api.VolumeStatus{Claim: "db-data-zone-a", Phase: "Bound", Capacity: "1Gi", VolumeName: "pv-1"}, o.Volume)

	pending := podObserved(nil, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}})
	assert.Equal(t, &podObservation{Volume: &api.VolumeStatus{Claim: "c", Phase: "Pending"}}, pending)
	assert.Nil(t, podObserved(nil, nil))

	// A container with no status yet is Waiting, with its spec's image.
	p := livePod()
	p.Status.ContainerStatuses = nil
	o = podObserved(viewOf(p), nil)
	assert.Equal(t, api.ContainerStatus{Name: "app", Type: api.ContainerMain, Image: "app:2", State: "Waiting"}, o.Containers[2])
	assert.Nil(t, o.Volume)
}

// TestFoldPodDetails: the Pod's status comes from its healthy shard; a
// Pod with none observed has no Pod status.
func TestFoldPodDetails(t *testing.T) {
	w := &api.Workload{Kind: api.KindPod, Metadata: api.Metadata{Project: "p", Name: "db", Generation: 1}, Spec: &api.PodSpec{}}
	old := observation{Part: &podPart{Pod: &podObservation{UID: "old"}}}
	cur := observation{Running: 1, Ready: 1, Part: &podPart{Pod: &podObservation{UID: "new", Containers: []api.ContainerStatus{{Name: "app", Image: "app:1"}}}}}
	st := api.Status{Zones: map[string]api.ZoneStatus{}, Clusters: map[string]api.ZoneStatus{}}
	foldPod(w, []shardView{{cluster: "zone-a", zone: "a", desired: 1, obs: old}, {cluster: "zone-b", zone: "b", healthy: true, desired: 1, obs: cur}}, &st)
	require.NotNil(t, st.Pod)
	assert.Equal(t, "zone-b", st.Pod.Cluster)
	assert.Equal(t, "new", st.Pod.UID)
	assert.Equal(t, partOf[podPart](cur).Pod.Containers, st.Pod.Containers)

	st = api.Status{Zones: map[string]api.ZoneStatus{}, Clusters: map[string]api.ZoneStatus{}}
	foldPod(w, []shardView{{cluster: "zone-a", zone: "a", healthy: true, desired: 1}}, &st)
	assert.Nil(t, st.Pod)
}
