package propagator

import (
	"bytes"
	"encoding/json"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	appsv1 "k8s.io/api/apps/v1"

	"atoll.dev/libs/api"
)

// The sidecar rollout (services/admission sidecars_rollout.go) moves the
// stored workloads to a new version of the managed sidecars at once, and
// opens the region's zones to it one at a time: its progress
// (api.SidecarProgress, bus.BucketSidecars) lists the zones, and a moved
// App's shard in a zone not opened yet is rendered with the sidecars it
// ran before (api.Metadata.SidecarPrevious; SidecarProgress.HeldBack).
// A change of the progress requeues every moved workload, like a
// placement change, so a zone that opens (or rolls back) moves its pods
// in place (sidecars_inplace.go).
//
// The sidecar rollout, not the App's own zone-by-zone rollout, decides
// which sidecars a moved App's shard runs: the previous version's in a
// zone not opened yet, the App's own version's once it is opened, even
// where the App's rollout still gives the zone its stable template (the
// App's rollout orders its zones and bakes each on its own, which would
// otherwise hold an opened zone back). Such a shard says it runs the
// template the App's rollout gives the zone (api.AnnoTemplate), so that
// rollout goes on as if the sidecars were its template's.

func decodeSidecarProgress(b []byte) (*api.SidecarProgress, error) {
	var p api.SidecarProgress
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// sidecarProgress returns the sidecar rollout's progress and its
// revision; nil and 0 when there is none (or no mirror: tests).
func (s *Service) sidecarProgress() (*api.SidecarProgress, uint64) {
	if s.sidecarRollout == nil {
		return nil, 0
	}
	e, ok := s.sidecarRollout.Get(api.SidecarProgressKey)
	if !ok || e.Err != nil {
		return nil, e.Revision
	}
	return e.Value, e.Revision
}

// sidecarRev returns the revision of the sidecar rollout's progress.
func (s *Service) sidecarRev() uint64 {
	_, rev := s.sidecarProgress()
	return rev
}

// movedMark is in the stored document of every workload the sidecar
// rollout moved.
var movedMark = []byte(`"sidecarPrevious"`)

// sidecarProgressChanged requeues every workload the sidecar rollout
// moved: the zones they run the new version in may have changed.
func (s *Service) sidecarProgressChanged(string) {
	if !s.placementsLive.Load() {
		return
	}
	for _, key := range s.workloads.Keys() {
		if e, ok := s.workloads.Get(key); ok && bytes.Contains(e.Value, movedMark) {
			s.placementChanged(key)
		}
	}
}

// sidecarsHeldBack makes the object of a shard whose sidecars the
// sidecar rollout decides say the template its App's rollout gives the
// zone (see above).
func sidecarsHeldBack(o *object, w *api.Workload) {
	h := api.TemplateHash(&w.Spec.(*api.AppSpec).Template)
	if m, err := apimeta.Accessor(o.obj); err == nil && m.GetAnnotations() != nil {
		m.GetAnnotations()[api.AnnoTemplate] = h
	}
	if d, ok := o.obj.(*appsv1.Deployment); ok {
		if a := d.Spec.Template.Annotations; a != nil && a[api.AnnoTemplate] != "" {
			a[api.AnnoTemplate] = h
		}
	}
}
