package propagator

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/api"
)

func workload(kind string, c api.Control) *api.Workload {
	var spec api.Spec
	tmpl := api.PodTemplate{Containers: []api.Container{{Name: "web", Image: "nginx"}, {Name: "proxy", Image: "envoy"}}}
	switch kind {
	case api.KindApp:
		spec = &api.AppSpec{Common: api.Common{Template: tmpl}}
	case api.KindJobSet:
		spec = &api.JobSetSpec{Common: api.Common{Template: tmpl}, Parallelism: 2, Completions: 10}
	default:
		spec = &api.PodSpec{Common: api.Common{Template: tmpl}}
	}
	spec.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: kind, Metadata: api.Metadata{Project: "p", Name: "w", Generation: 3}, Spec: spec, Control: c}
}

func TestRenderControl(t *testing.T) {
	at := time.Date(2025, 6, 1, 8, 30, 0, 42, time.UTC)
	const stamp = "2025-06-01T08:30:00.000000042Z"
	sh := api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 3, IndexStart: 0, IndexEnd: 5}
	restarts := api.Control{RestartedAt: at, ContainerRestarts: map[string]time.Time{"proxy": at}}
	bothAnnotations := map[string]string{api.AnnoRestartedAt: stamp, "atoll.dev/restart.proxy": stamp}
	tests := []struct {
		name        string
		w           *api.Workload
		replicas    int32             // Deployment replicas or Job parallelism
		suspend     bool              // Jobs only
		annotations map[string]string // on the pod template (Pods: on the Pod)
	}{
		{"app", workload(api.KindApp, api.Control{}), 3, false, nil},
		{"paused app", workload(api.KindApp, api.Control{Paused: true}), 0, false, nil},
		{"restarted app", workload(api.KindApp, restarts), 3, false, bothAnnotations},
		{"jobset", workload(api.KindJobSet, api.Control{}), 3, false, nil},
		{"paused jobset", workload(api.KindJobSet, api.Control{Paused: true}), 3, true, nil},
		{"restarted jobset", workload(api.KindJobSet, api.Control{RestartedAt: at}), 3, false, map[string]string{api.AnnoRestartedAt: stamp}},
		{"pod", workload(api.KindPod, api.Control{}), 0, false, nil},
		{"restarted pod", workload(api.KindPod, restarts), 0, false, bothAnnotations},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var (
				replicas    int32
				suspend     bool
				annotations map[string]string
			)
			switch o := newKinds()[tc.w.Kind].render(&desired{workload: tc.w}, sh).obj.(type) {
			case *appsv1.Deployment:
				replicas, annotations = *o.Spec.Replicas, o.Spec.Template.Annotations
			case *batchv1.Job:
				replicas, suspend, annotations = *o.Spec.Parallelism, *o.Spec.Suspend, o.Spec.Template.Annotations
			case *corev1.Pod:
				annotations = restartAnnotations(o.Annotations)
				if len(annotations) == 0 {
					annotations = nil
				}
				if o.Annotations[api.AnnoGeneration] != "3" {
					t.Errorf("pod lost its generation annotation: %v", o.Annotations)
				}
			}
			if replicas != tc.replicas || suspend != tc.suspend {
				t.Errorf("replicas %d suspend %v, want %d %v", replicas, suspend, tc.replicas, tc.suspend)
			}
			if diff := cmp.Diff(tc.annotations, annotations); diff != "" {
				t.Errorf("restart annotations (-want +got):\n%s", diff)
			}
		})
	}
}

// A pause or a scale must not touch the pod template: the pods stay.
func TestPauseLeavesThePodTemplate(t *testing.T) {
	sh := api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 3}
	run := renderApp(workload(api.KindApp, api.Control{}), sh).obj.(*appsv1.Deployment)
	paused := renderApp(workload(api.KindApp, api.Control{Paused: true}), sh).obj.(*appsv1.Deployment)
	if diff := cmp.Diff(run.Spec.Template, paused.Spec.Template); diff != "" {
		t.Errorf("pod template changed by a pause (-running +paused):\n%s", diff)
	}
}
