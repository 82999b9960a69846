package propagator

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

func inPlaceTemplate(rev, app, helper string, env ...corev1.EnvVar) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"x": "y"}, Annotations: map[string]string{api.AnnoTemplate: rev}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "log", Image: "log:1"}},
			Containers:     []corev1.Container{{Name: "app", Image: app, Env: env}, {Name: "helper", Image: helper}},
		},
	}
}

// TestImagesOnly: a template change of container images (and the
// revision annotation) is in place; anything else is not; the
// ReplicaSet's pod-template-hash label is no change.
func TestImagesOnly(t *testing.T) {
	hashed := inPlaceTemplate("r1", "app:1", "helper:1")
	hashed.Labels[podTemplateHash] = "abc"
	tests := []struct {
		name string
		a, b *corev1.PodTemplateSpec
		want bool
	}{
		{"same", inPlaceTemplate("r1", "app:1", "helper:1"), inPlaceTemplate("r1", "app:1", "helper:1"), true},
		{"one image", inPlaceTemplate("r1", "app:1", "helper:1"), inPlaceTemplate("r2", "app:2", "helper:1"), true},
		{"both images", inPlaceTemplate("r1", "app:1", "helper:1"), inPlaceTemplate("r2", "app:2", "helper:2"), true},
		{"replicaset's hash label", hashed, inPlaceTemplate("r2", "app:2", "helper:1"), true},
		{"env", inPlaceTemplate("r1", "app:1", "helper:1"), inPlaceTemplate("r2", "app:1", "helper:1", corev1.EnvVar{Name: "MODE", Value: "fast"}), false},
		{"env and image", inPlaceTemplate("r1", "app:1", "helper:1"), inPlaceTemplate("r2", "app:2", "helper:1", corev1.EnvVar{Name: "MODE", Value: "fast"}), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := imagesOnly(tc.a, tc.b); got != tc.want {
				t.Errorf("imagesOnly = %v, want %v", got, tc.want)
			}
		})
	}
	added := inPlaceTemplate("r2", "app:1", "helper:1")
	added.Spec.Containers = append(added.Spec.Containers, corev1.Container{Name: "new", Image: "new:1"})
	if imagesOnly(inPlaceTemplate("r1", "app:1", "helper:1"), added) {
		t.Error("a new container is in place")
	}
}

// TestImagePatch: the patch names only the changed containers, with the
// pod's UID; nothing when the pod has the images and annotations.
func TestImagePatch(t *testing.T) {
	live := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", Annotations: map[string]string{api.AnnoTemplate: "r1"}},
		Spec: inPlaceTemplate("r1", "app:1", "helper:1").Spec}
	want := inPlaceTemplate("r2", "app:2", "helper:1").Spec
	want.InitContainers[0].Image = "log:2"
	var got map[string]any
	if err := json.Unmarshal(imagePatch(live, &want, map[string]string{api.AnnoTemplate: "r2"}), &got); err != nil {
		t.Fatal(err)
	}
	wantPatch := map[string]any{
		"metadata": map[string]any{"uid": "u1", "annotations": map[string]any{api.AnnoTemplate: "r2"}},
		"spec": map[string]any{
			"containers":     []any{map[string]any{"name": "app", "image": "app:2"}},
			"initContainers": []any{map[string]any{"name": "log", "image": "log:2"}},
		},
	}
	if diff := cmp.Diff(wantPatch, got); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
	if p := imagePatch(live, &live.Spec, map[string]string{api.AnnoTemplate: "r1"}); p != nil {
		t.Errorf("patch of an unchanged pod: %s", p)
	}
}

// TestInPlaceBudget: as many pods on the way as the Deployment's
// maxUnavailable lets go (rounded down), at least one.
func TestInPlaceBudget(t *testing.T) {
	tests := []struct {
		name     string
		replicas int32
		max      *intstr.IntOrString
		want     int
	}{
		{"count", 10, ptr.To(intstr.FromInt32(3)), 3},
		{"percent rounds down", 10, ptr.To(intstr.FromString("25%")), 2},
		{"never none", 3, ptr.To(intstr.FromString("25%")), 1},
		{"zero is one", 5, ptr.To(intstr.FromInt32(0)), 1},
		{"unset: a quarter", 8, nil, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &tc.replicas,
				Strategy: appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: tc.max}}}}
			if got := inPlaceBudget(d); got != tc.want {
				t.Errorf("inPlaceBudget = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestSettled: a pod is done with an in-place update once ready and its
// kubelet saw its generation, or (KWOK) its statuses show the spec's images.
func TestSettled(t *testing.T) {
	pod := func(ready bool, gen, observed int64, statusImage string) *corev1.Pod {
		cond := corev1.ConditionFalse
		if ready {
			cond = corev1.ConditionTrue
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: gen},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:2"}}},
			Status: corev1.PodStatus{ObservedGeneration: observed, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: statusImage}}}}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"kubelet saw it", pod(true, 2, 2, "docker.io/library/app:2"), true},
		{"kubelet behind", pod(true, 2, 1, "app:1"), false},
		{"not ready", pod(false, 2, 2, "app:2"), false},
		{"kwok: new image", pod(true, 2, 0, "app:2"), true},
		{"kwok: old image", pod(true, 2, 0, "app:1"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := settled(tc.pod); got != tc.want {
				t.Errorf("settled = %v, want %v", got, tc.want)
			}
		})
	}
}
