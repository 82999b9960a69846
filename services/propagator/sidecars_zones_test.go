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
	// The App's own rollout has not given any zone the moved template:
	// its stable template has the previous sidecars.
	stable := moved()
	stableTemplate := stable.Spec.(*api.AppSpec).Template
	stableTemplate.Sidecars = stable.Metadata.SidecarPrevious.Sidecars
	appRollout := &api.Rollout{Stable: api.TemplateHash(&stableTemplate), StableTemplate: &stableTemplate}
	// Rolled back to version 1 (previous dropped), while the App's own
	// rollout still has the failed version's template as stable.
	back := moved()
	back.Spec.PodTemplate().Sidecars = back.Metadata.SidecarPrevious.Sidecars
	back.Metadata.SidecarVersion, back.Metadata.SidecarPrevious = 1, nil
	failedTemplate := moved().Spec.(*api.AppSpec).Template
	staleRollout := &api.Rollout{Phase: api.RolloutComplete, Stable: api.TemplateHash(&failedTemplate), StableTemplate: &failedTemplate}
	tests := []struct {
		name     string
		w        *api.Workload
		rollout  *api.Rollout
		progress *api.SidecarProgress
		zone     string
		want     string
	}{
		{"zone done", moved(), nil, progress, "a", "log:2"},
		{"zone moving", moved(), nil, progress, "b", "log:2"},
		{"zone pending", moved(), nil, progress, "c", "log:1"},
		{"zone not listed", moved(), nil, progress, "d", "log:1"},
		{"zone rolled back", moved(), nil, &rolledBack, "a", "log:1"},
		{"rollout complete", moved(), nil, &complete, "c", "log:2"},
		{"another version's rollout", moved(), nil, &api.SidecarProgress{Version: 3, Phase: api.SidecarRolloutProgressing}, "c", "log:2"},
		{"written during the rollout", written, nil, progress, "c", "log:2"},
		{"its rollout's progress not seen yet", moved(), nil, nil, "c", "log:1"},
		{"an earlier version's progress only", moved(), nil, &api.SidecarProgress{Version: 1, Phase: api.SidecarRolloutComplete}, "a", "log:1"},
		{"zone open before the App's rollout gives it", moved(), appRollout, progress, "b", "log:2"},
		{"zone pending, App's rollout on the stable template", moved(), appRollout, progress, "c", "log:1"},
		{"rolled back, the App's rollout not stepped yet", back, staleRollout, &rolledBack, "c", "log:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &desired{workload: tt.w, kind: appKind{}, rollout: tt.rollout, sidecars: tt.progress, hashes: map[string]string{}}
			sh := api.Shard{Cluster: "zone-" + tt.zone, Zone: tt.zone, Replicas: 1}
			dep := appKind{}.render(d, sh).obj.(*appsv1.Deployment)
			images := sidecarImages(&dep.Spec.Template.Spec)
			if diff := cmp.Diff(map[string]string{"log": tt.want}, images); diff != "" {
				t.Errorf("sidecars (-want +got):\n%s", diff)
			}
			if got, want := dep.Annotations[api.AnnoTemplate], api.TemplateHash(&d.rolloutWorkload(sh).Spec.(*api.AppSpec).Template); got != want {
				t.Errorf("template annotation %s, want the one the App's rollout gives the zone, %s", got, want)
			}
		})
	}
}
