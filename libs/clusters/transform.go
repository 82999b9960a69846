package clusters

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// SlimNode is a node informer's transform (SharedIndexInformer.SetTransform):
// it drops what no service of the platform reads and what makes a node
// object large — managedFields, the list of images the kubelet holds and
// the attached volumes — so a cache of thousands of nodes stays small.
// Anything but a *corev1.Node passes with only its managedFields dropped.
func SlimNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.ManagedFields = nil
		n.Status.Images = nil
		n.Status.VolumesAttached = nil
		n.Status.VolumesInUse = nil
		return n, nil
	}
	return DropManagedFields(obj)
}

// DropManagedFields is an informer's transform that drops an object's
// managedFields, which no service of the platform reads (about a third
// of a Deployment's bytes); the rest of the object is kept.
func DropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
