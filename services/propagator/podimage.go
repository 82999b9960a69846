package propagator

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Patching container images of a live pod in place: the API server takes
// an image change of a container or an init container on a live Pod, and
// the kubelet restarts only that container (the pod keeps its UID). Used
// by the in-place updates of Apps' pods.

// patchPodImages sets the images of the named containers (init
// containers, native sidecars included, with init true) of a live pod,
// with a strategic merge patch (containers merge by name).
func (t *target) patchPodImages(ctx context.Context, ns, pod string, init bool, images map[string]string) error {
	field := "containers"
	if init {
		field = "initContainers"
	}
	var cs []map[string]string
	for name, image := range images {
		cs = append(cs, map[string]string{"name": name, "image": image})
	}
	body, err := json.Marshal(map[string]any{"spec": map[string]any{field: cs}})
	if err != nil {
		return err
	}
	err = t.call(func() error {
		_, err := t.cs.CoreV1().Pods(ns).Patch(ctx, pod, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("patch images of pod %s/%s: %w", ns, pod, err)
	}
	return nil
}

// runsImages says whether every named container of p (init containers
// with init true) runs its image: the spec says so and the container's
// status reports it (KWOK and the kubelet alike report the running
// image there).
func runsImages(p *corev1.Pod, init bool, images map[string]string) bool {
	specs, statuses := p.Spec.Containers, p.Status.ContainerStatuses
	if init {
		specs, statuses = p.Spec.InitContainers, p.Status.InitContainerStatuses
	}
	for name, image := range images {
		ok := false
		for _, c := range specs {
			if c.Name == name && c.Image == image {
				ok = true
			}
		}
		for _, s := range statuses {
			if s.Name == name && s.Image != image {
				ok = false
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
