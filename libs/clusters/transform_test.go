package clusters

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestSlimNode: a node keeps what the services read (labels, taints,
// conditions, capacity) and loses managedFields, images and volumes.
func TestSlimNode(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"atoll.dev/pool": "general"},
			Annotations:   map[string]string{"atoll.dev/upgrade": "wave-1"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "atoll.dev/tier", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Conditions:   []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32")},
			Images:       []corev1.ContainerImage{{Names: []string{"registry.example/big:1"}, SizeBytes: 1 << 30}},
			VolumesInUse: []corev1.UniqueVolumeName{"kubernetes.io/csi/x"},
		},
	}
	var transform cache.TransformFunc = SlimNode
	out, err := transform(n)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Node)
	switch {
	case got.ManagedFields != nil, got.Status.Images != nil, got.Status.VolumesInUse != nil:
		t.Errorf("kept what no service reads: %+v", got)
	case got.Labels["atoll.dev/pool"] != "general", got.Annotations["atoll.dev/upgrade"] != "wave-1",
		!got.Spec.Unschedulable, len(got.Spec.Taints) != 1, len(got.Status.Conditions) != 1, got.Status.Allocatable.Cpu().Value() != 32:
		t.Errorf("dropped what the services read: %+v", got)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "n1", Obj: n}
	if back, _ := transform(tomb); back != tomb {
		t.Errorf("a tombstone changed: %v", back)
	}
}
