package propagator

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A live pod's container images are mutable: a patch of only images (and
// annotations) keeps the pod, and its kubelet restarts only the containers
// whose image changed. imagePatch and patchPod are that patch, shared by
// what updates live pods in place (an App's InPlaceIfPossible update,
// app_inplace.go). The Pod kind takes the same change through its
// server-side apply (kind_pod.go).

// imagePatch returns the strategic merge patch that gives live the images
// of want's containers and init containers of the same names, and the
// annotations annos; nil when live has them all already. It carries the
// pod's UID, so it never lands on a pod of the same name made since.
func imagePatch(live *corev1.Pod, want *corev1.PodSpec, annos map[string]string) []byte {
	type image struct {
		Name  string `json:"name"`
		Image string `json:"image"`
	}
	changed := func(have, want []corev1.Container) []image {
		var out []image
		for _, w := range want {
			for _, h := range have {
				if h.Name == w.Name && h.Image != w.Image {
					out = append(out, image{w.Name, w.Image})
				}
			}
		}
		return out
	}
	containers := changed(live.Spec.Containers, want.Containers)
	inits := changed(live.Spec.InitContainers, want.InitContainers)
	newAnnos := map[string]string{}
	for k, v := range annos {
		if live.Annotations[k] != v {
			newAnnos[k] = v
		}
	}
	if len(containers) == 0 && len(inits) == 0 && len(newAnnos) == 0 {
		return nil
	}
	type spec struct {
		Containers     []image `json:"containers,omitempty"`
		InitContainers []image `json:"initContainers,omitempty"`
	}
	type meta struct {
		UID         types.UID         `json:"uid"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	body, _ := json.Marshal(struct {
		Metadata meta `json:"metadata"`
		Spec     spec `json:"spec"`
	}{meta{live.UID, newAnnos}, spec{containers, inits}})
	return body
}

// InPlaceManager is the field manager of the in-place patches of live
// pods and of what an in-place update changes besides them.
const InPlaceManager = "atoll-propagator-inplace"

// patchPod patches a live pod with a strategic merge patch (imagePatch).
func (t *target) patchPod(ctx context.Context, ns, name string, patch []byte) error {
	err := t.call(func() error {
		_, err := t.cs.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{FieldManager: InPlaceManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("patch pod %s/%s in place: %w", ns, name, err)
	}
	return nil
}

// withImages returns a copy of spec with the images of want's containers
// and init containers of the same names.
func withImages(spec corev1.PodSpec, want *corev1.PodSpec) corev1.PodSpec {
	set := func(have, want []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, len(have))
		for i, h := range have {
			out[i] = *h.DeepCopy()
			for _, w := range want {
				if w.Name == h.Name {
					out[i].Image = w.Image
				}
			}
		}
		return out
	}
	spec = *spec.DeepCopy()
	spec.Containers = set(spec.Containers, want.Containers)
	spec.InitContainers = set(spec.InitContainers, want.InitContainers)
	return spec
}
