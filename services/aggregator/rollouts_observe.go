package aggregator

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// failingPods counts the pods of d's current template that failed or are
// crash-looping: phase Failed, or a container waiting in CrashLoopBackOff.
// A pod is of the current template when its containers run the
// template's images and it carries the template's labels; pods left
// failed by an earlier template (a ReplicaSet scaled down keeps its
// failed pods) do not count, so a rollout is not failed by its past.
func failingPods(pods []*corev1.Pod, d *appsv1.Deployment) int32 {
	tmpl := d.Spec.Template
	var n int32
	for _, p := range pods {
		if !ofTemplate(p, &tmpl) {
			continue
		}
		if p.Status.Phase == corev1.PodFailed || crashLooping(p) {
			n++
		}
	}
	return n
}

func ofTemplate(p *corev1.Pod, t *corev1.PodTemplateSpec) bool {
	if len(p.Spec.Containers) != len(t.Spec.Containers) {
		return false
	}
	for i, c := range t.Spec.Containers {
		if p.Spec.Containers[i].Image != c.Image {
			return false
		}
	}
	for k, v := range t.Labels {
		if got, ok := p.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func crashLooping(p *corev1.Pod) bool {
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			return true
		}
	}
	return false
}
