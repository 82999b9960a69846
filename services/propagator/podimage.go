package propagator

import (
	corev1 "k8s.io/api/core/v1"
)

// Whether a live pod runs the images an in-place update gave it (the
// patch itself is imagePatch, inplace.go).

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
