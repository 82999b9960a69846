package aggregator

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFailingPods(t *testing.T) {
	dep := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "fail": "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:v2"}}},
	}}}
	pod := func(image string, labels map[string]string, phase corev1.PodPhase, waiting string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
			Status: corev1.PodStatus{Phase: phase}}
		if waiting != "" {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}}}
		}
		return p
	}
	v2 := map[string]string{"app": "web", "fail": "true", "pod-template-hash": "x"}
	tests := []struct {
		name string
		pods []*corev1.Pod
		want int32
	}{
		{"none", nil, 0},
		{"running pods of the template", []*corev1.Pod{pod("web:v2", v2, corev1.PodRunning, "")}, 0},
		{"failed pod of the template", []*corev1.Pod{pod("web:v2", v2, corev1.PodFailed, "")}, 1},
		{"crash-looping pod of the template", []*corev1.Pod{pod("web:v2", v2, corev1.PodRunning, "CrashLoopBackOff")}, 1},
		{"failed pod of an older image", []*corev1.Pod{pod("web:v1", v2, corev1.PodFailed, "")}, 0},
		{"failed pod without the template's labels", []*corev1.Pod{pod("web:v2", map[string]string{"app": "web"}, corev1.PodFailed, "")}, 0},
		{"some of each", []*corev1.Pod{pod("web:v2", v2, corev1.PodFailed, ""), pod("web:v1", v2, corev1.PodFailed, ""), pod("web:v2", v2, corev1.PodFailed, "")}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failingPods(views(tt.pods), dep); got != tt.want {
				t.Errorf("failingPods = %d, want %d", got, tt.want)
			}
		})
	}
}
