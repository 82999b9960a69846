package propagator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"

	"atoll.dev/libs/api"
)

// TestSidecarsHeldBack renders a moved App's shard per zone of a sidecar
// rollout: a zone not opened yet runs the previous version's sidecars and
// still says the App's own template (its rollout goes on); an open zone,
// a complete rollout, and a workload not moved by it run the App's own.
func TestSidecarsHeldBack(t *testing.T) {
	moved := func() *api.Workload {
		w := app("web", 3)
		w.Spec.PodTemplate().Sidecars = []api.Container{{Name: "log", Image: "log:2"}}
		w.Metadata.SidecarVersion = 2
		w.Metadata.SidecarPrevious = &api.SidecarPrevious{Version: 1, Sidecars: []api.Container{{Name: "log", Image: "log:1"}}}
		return w
	}
	progress := &api.SidecarProgress{Version: 2, Phase: api.SidecarRolloutProgressing, Zones: []api.SidecarZone{
		{Name: "a", Phase: api.SidecarZoneDone}, {Name: "b", Phase: api.SidecarZoneMoving}, {Name: "c", Phase: api.SidecarZonePending}}}
	written := moved()
	written.Metadata.SidecarPrevious = nil
	complete := *progress
	complete.Phase = api.SidecarRolloutComplete
	rolledBack := *progress
	rolledBack.Zones = []api.SidecarZone{{Name: "a", Phase: api.SidecarZoneRolledBack}}
	tests := []struct {
		name     string
		w        *api.Workload
		progress *api.SidecarProgress
		zone     string
		want     string
	}{
		{"zone done", moved(), progress, "a", "log:2"},
		{"zone moving", moved(), progress, "b", "log:2"},
		{"zone pending", moved(), progress, "c", "log:1"},
		{"zone not listed", moved(), progress, "d", "log:1"},
		{"zone rolled back", moved(), &rolledBack, "a", "log:1"},
		{"rollout complete", moved(), &complete, "c", "log:2"},
		{"another version's rollout", moved(), &api.SidecarProgress{Version: 3, Phase: api.SidecarRolloutProgressing}, "c", "log:2"},
		{"written during the rollout", written, progress, "c", "log:2"},
		{"no rollout", moved(), nil, "c", "log:2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &desired{workload: tt.w, kind: appKind{}, sidecars: tt.progress, hashes: map[string]string{}}
			sh := api.Shard{Cluster: "zone-" + tt.zone, Zone: tt.zone, Replicas: 1}
			dep := appKind{}.render(d, sh).obj.(*appsv1.Deployment)
			images := sidecarImages(&dep.Spec.Template.Spec)
			if diff := cmp.Diff(map[string]string{"log": tt.want}, images); diff != "" {
				t.Errorf("sidecars (-want +got):\n%s", diff)
			}
			if got, want := dep.Annotations[api.AnnoTemplate], api.TemplateHash(&tt.w.Spec.(*api.AppSpec).Template); got != want {
				t.Errorf("template annotation %s, want the App's own %s", got, want)
			}
		})
	}
}
