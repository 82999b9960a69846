package propagator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// statefulApp is workload's App with claim templates.
func statefulApp(c api.Control) *api.Workload {
	w := workload(api.KindApp, c)
	s := w.Spec.(*api.AppSpec)
	s.Template.VolumeClaimTemplates = []api.VolumeClaimTemplate{{Name: "data", Storage: "2Gi", StorageClass: "manual"}}
	s.Template.Containers[0].VolumeMounts = []api.VolumeMount{{Name: "data", MountPath: "/data"}}
	s.Default()
	return w
}

// An App with claim templates is a StatefulSet per shard: its ordinals
// start at its zone's range, whatever the shard's size, its claims are
// kept on scale-down and deleted with it, and a pause holds it at zero.
func TestRenderStatefulApp(t *testing.T) {
	tests := []struct {
		name     string
		control  api.Control
		sh       api.Shard
		replicas int32
	}{
		{"zone a", api.Control{}, api.Shard{Cluster: "ca", Zone: "a", Replicas: 1}, 1},
		{"zone a scaled", api.Control{}, api.Shard{Cluster: "ca", Zone: "a", Replicas: 4}, 4},
		{"zone b", api.Control{}, api.Shard{Cluster: "cb", Zone: "b", Replicas: 2}, 2},
		{"paused", api.Control{Paused: true}, api.Shard{Cluster: "cb", Zone: "b", Replicas: 2}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := renderApp(statefulApp(tc.control), tc.sh)
			ss, ok := o.obj.(*appsv1.StatefulSet)
			if !ok {
				t.Fatalf("rendered %T, want a StatefulSet", o.obj)
			}
			if o.gvr != statefulsets || o.name != "w" {
				t.Errorf("object %v %s", o.gvr, o.name)
			}
			if got := *ss.Spec.Replicas; got != tc.replicas {
				t.Errorf("replicas %d, want %d", got, tc.replicas)
			}
			if got, want := ss.Spec.Ordinals.Start, api.OrdinalStart(tc.sh.Zone); got != want {
				t.Errorf("ordinals start %d, want %d", got, want)
			}
			want := []corev1.PersistentVolumeClaimSpec{{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr.To("manual"),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
			}}
			var got []corev1.PersistentVolumeClaimSpec
			for _, c := range ss.Spec.VolumeClaimTemplates {
				got = append(got, c.Spec)
				if c.Name != "data" {
					t.Errorf("claim template %q", c.Name)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("claim templates (-want +got):\n%s", diff)
			}
			p := ss.Spec.PersistentVolumeClaimRetentionPolicy
			if p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType || p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
				t.Errorf("retention %+v", p)
			}
		})
	}
}

// The pods of a stateful App are hardened and given their identity like
// a Deployment's, and an App without claims stays a Deployment.
func TestStatefulAppFinished(t *testing.T) {
	sh := api.Shard{Cluster: "ca", Zone: "a", Replicas: 2}
	w := statefulApp(api.Control{})
	d := &desired{workload: w, kind: appKind{}, placement: &api.PlacementDecision{Shards: []api.Shard{sh}}, hashes: map[string]string{}, podSecurity: "restricted"}
	o, err := d.render("ca")
	if err != nil {
		t.Fatal(err)
	}
	ss := o.obj.(*appsv1.StatefulSet)
	if ss.Spec.Template.Spec.AutomountServiceAccountToken == nil || *ss.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Error("the pods are not hardened")
	}
	if o.hash == "" {
		t.Error("not stamped")
	}
	if _, ok := renderApp(workload(api.KindApp, api.Control{}), sh).obj.(*appsv1.Deployment); !ok {
		t.Error("an App without claims is not a Deployment")
	}
}
