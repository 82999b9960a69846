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
func failingPods(pods []*podView, d *appsv1.Deployment) int32 {
	tmpl := d.Spec.Template
	var n int32
	for _, p := range pods {
		if !ofTemplate(p, &tmpl) {
			continue
		}
		if p.phase() == corev1.PodFailed || crashLooping(p) {
			n++
		}
	}
	return n
}

func ofTemplate(p *podView, t *corev1.PodTemplateSpec) bool {
	mains := p.mains()
	if len(mains) != len(t.Spec.Containers) {
		return false
	}
	for i, c := range t.Spec.Containers {
		if mains[i].Image.String() != c.Image {
			return false
		}
	}
	labels := p.labels()
	for k, v := range t.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// crashLoopState is the state containerState names for a main container
// in CrashLoopBackOff.
const crashLoopState = "Waiting (CrashLoopBackOff)"

func crashLooping(p *podView) bool {
	for _, c := range p.mains() {
		if c.State.String() == crashLoopState {
			return true
		}
	}
	return false
}
