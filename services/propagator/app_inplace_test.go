package propagator

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
