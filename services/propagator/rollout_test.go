package propagator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"atoll.dev/libs/api"
)

func TestRollingUpdateFollowsTheBudget(t *testing.T) {
	tests := []struct {
		name     string
		budget   *api.Availability
		replicas int32
		want     string
	}{
		{"default", nil, 4, "25%"},
		{"max unavailable count", &api.Availability{MaxUnavailable: "1"}, 4, "1"},
		{"max unavailable percent", &api.Availability{MaxUnavailable: "50%"}, 4, "50%"},
		{"min available percent", &api.Availability{MinAvailable: "75%"}, 4, "25%"},
		{"min available all", &api.Availability{MinAvailable: "100%"}, 4, "0%"},
		{"min available count", &api.Availability{MinAvailable: "3"}, 4, "1"},
		{"min available count above replicas", &api.Availability{MinAvailable: "5"}, 4, "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rollingUpdate(&api.AppSpec{Availability: tt.budget}, tt.replicas)
			if diff := cmp.Diff(tt.want, s.RollingUpdate.MaxUnavailable.String()); diff != "" {
				t.Errorf("maxUnavailable (-want +got):\n%s", diff)
			}
			if s.RollingUpdate.MaxSurge.Type != intstr.String || s.RollingUpdate.MaxSurge.StrVal != "25%" {
				t.Errorf("maxSurge %v, want 25%%", s.RollingUpdate.MaxSurge)
			}
		})
	}
}

func TestZoneWorkloadRendersTheZonesTemplate(t *testing.T) {
	tmpl := func(image string) api.PodTemplate {
		return api.PodTemplate{Containers: []api.Container{{Name: "web", Image: image}}}
	}
	v1, v2 := tmpl("web:v1"), tmpl("web:v2")
	spec := &api.AppSpec{Common: api.Common{Template: v2}}
	w := &api.Workload{Kind: api.KindApp, Spec: spec}
	ro := &api.Rollout{Phase: api.RolloutProgressing, Stable: api.TemplateHash(&v1), StableTemplate: &v1,
		Target: api.TemplateHash(&v2), Zones: []api.ZoneRollout{
			{Zone: "a", State: api.ZoneBaking, Revision: api.TemplateHash(&v2)},
			{Zone: "b", State: api.ZonePending, Revision: api.TemplateHash(&v1)},
		}}
	tests := []struct {
		name    string
		rollout *api.Rollout
		zone    string
		want    string
	}{
		{"no rollout", nil, "b", "web:v2"},
		{"zone on the target", ro, "a", "web:v2"},
		{"zone not yet", ro, "b", "web:v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &desired{workload: w, rollout: tt.rollout}
			zw := d.zoneWorkload(api.Shard{Cluster: "zone-" + tt.zone, Zone: tt.zone, Replicas: 2})
			o := renderApp(zw, api.Shard{Cluster: "zone-" + tt.zone, Zone: tt.zone, Replicas: 2})
			d2, ok := o.obj.(*appsv1.Deployment)
			if !ok {
				t.Fatalf("rendered %T", o.obj)
			}
			got := d2.Spec.Template.Spec.Containers[0].Image
			if d2.Annotations[api.AnnoTemplate] != api.TemplateHash(&zw.Spec.(*api.AppSpec).Template) {
				t.Errorf("template annotation %q", d2.Annotations[api.AnnoTemplate])
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("image (-want +got):\n%s", diff)
			}
			if spec.Template.Containers[0].Image != "web:v2" {
				t.Fatalf("the workload's spec was changed")
			}
		})
	}
}
