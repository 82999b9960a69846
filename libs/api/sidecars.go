package api

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Managed sidecars are platform configuration with versions. Platform
// admins set the whole list at once (SidecarSpec); each change is a new
// SidecarVersion, numbered from 1, kept with its history in the
// bus.BucketSidecars bucket (one key per version, SidecarVersionKey, and
// SidecarCurrentKey naming the newest). Admission injects the current
// version into every workload it admits (the sidecars that apply to its
// kind and project) and records the version in the workload
// (Metadata.SidecarVersion), so a workload runs exactly one version: the
// one read once for its write.

// SidecarCurrentKey is the key of the current version's number in
// bus.BucketSidecars.
const SidecarCurrentKey = "current"

// SidecarVersionKey is the key of version n in bus.BucketSidecars.
func SidecarVersionKey(n int64) string { return "v." + strconv.FormatInt(n, 10) }

// SidecarVersionOfKey parses a key made by SidecarVersionKey.
func SidecarVersionOfKey(k string) (int64, bool) {
	s, ok := strings.CutPrefix(k, "v.")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

// Sidecar rollout failure policies (SidecarRollout.OnFailure).
const (
	// SidecarOnFailurePause stops the rollout where the health gate failed.
	SidecarOnFailurePause = "Pause"
	// SidecarOnFailureRollback stops it and returns the failed zone to the
	// version it ran before.
	SidecarOnFailureRollback = "Rollback"
)

// ManagedSidecar is one platform-managed sidecar: a container run beside
// the user's as a native sidecar (an init container with restartPolicy
// Always), so it starts before the user's containers and stops after
// them. Sidecars start in the order of SidecarSpec.Sidecars.
type ManagedSidecar struct {
	Container `json:",inline"`
	// Kinds are the workload kinds it applies to; empty means every kind
	// that runs pods.
	Kinds []string `json:"kinds,omitempty"`
	// Projects are the projects it applies to; empty means every project.
	Projects []string `json:"projects,omitempty"`
}

// AppliesTo reports whether the sidecar goes into a workload of kind in
// project.
func (m *ManagedSidecar) AppliesTo(kind, project string) bool {
	if len(m.Kinds) > 0 && !slices.ContainsFunc(m.Kinds, func(k string) bool { return strings.EqualFold(k, kind) }) {
		return false
	}
	return len(m.Projects) == 0 || slices.Contains(m.Projects, project)
}

// SidecarRollout is how a new version reaches the running workloads.
type SidecarRollout struct {
	// MaxUnavailable is how many Apps of the open zone move at once
	// (default 1): the zone opens to the moved Apps in key order, a next
	// one each time one before it is healthy on the new version, so at
	// most this many are moving there at any moment. Each App's pods
	// move within its own availability budget.
	MaxUnavailable int `json:"maxUnavailable,omitempty"`
	// BakeSeconds is how long a zone's upgraded pods must stay ready
	// before the next zone starts (default 60).
	BakeSeconds int `json:"bakeSeconds,omitempty"`
	// OnFailure is SidecarOnFailurePause (default) or
	// SidecarOnFailureRollback.
	OnFailure string `json:"onFailure,omitempty"`
}

// SidecarSpec is what a platform admin sets: the whole list of managed
// sidecars and how a change of it rolls out.
type SidecarSpec struct {
	// Sidecars are the managed sidecars, in start order.
	Sidecars []ManagedSidecar `json:"sidecars"`
	// Rollout is how this version reaches running workloads.
	Rollout SidecarRollout `json:"rollout,omitzero"`
}

// SidecarVersion is one stored version of the managed sidecars.
type SidecarVersion struct {
	// Version numbers the versions from 1.
	Version int64 `json:"version"`
	SidecarSpec
	// Created is when the version was set.
	Created time.Time `json:"created"`
	// CreatedBy is who set it.
	CreatedBy string `json:"createdBy,omitempty"`
}

// For returns the sidecars of v that apply to a workload of kind in
// project, as the containers admission injects.
func (v *SidecarVersion) For(kind, project string) []Container {
	var out []Container
	for i := range v.Sidecars {
		if v.Sidecars[i].AppliesTo(kind, project) {
			out = append(out, v.Sidecars[i].Container)
		}
	}
	return out
}

// Default fills the rollout's defaults.
func (s *SidecarSpec) Default() {
	if s.Rollout.MaxUnavailable == 0 {
		s.Rollout.MaxUnavailable = 1
	}
	if s.Rollout.BakeSeconds == 0 {
		s.Rollout.BakeSeconds = 60
	}
	if s.Rollout.OnFailure == "" {
		s.Rollout.OnFailure = SidecarOnFailurePause
	}
}

// Validate returns every problem of s, each naming its field.
func (s *SidecarSpec) Validate() FieldErrors {
	var fe FieldErrors
	names := map[string]bool{}
	for i, m := range s.Sidecars {
		p := fmt.Sprintf("sidecars[%d]", i)
		switch {
		case !IsDNSLabel(m.Name):
			fe.add(p+".name", CodeInvalid, "%q is not a DNS label", m.Name)
		case names[m.Name]:
			fe.add(p+".name", CodeDuplicate, "sidecar %q is listed twice", m.Name)
		}
		names[m.Name] = true
		if m.Image == "" {
			fe.add(p+".image", CodeRequired, "a sidecar needs an image")
		}
		if m.Privileged {
			fe.add(p+".privileged", CodeForbidden, "managed sidecars run unprivileged beside tenants' containers")
		}
		for j, k := range m.Kinds {
			kd, ok := LookupKind(k)
			switch {
			case !ok:
				fe.add(fmt.Sprintf("%s.kinds[%d]", p, j), CodeUnsupported, "%q is not a kind", k)
			case kd.NoPods:
				fe.add(fmt.Sprintf("%s.kinds[%d]", p, j), CodeInvalid, "a %s runs no pods", kd.Name)
			}
		}
		for j, pr := range m.Projects {
			if !IsDNSLabel(pr) {
				fe.add(fmt.Sprintf("%s.projects[%d]", p, j), CodeInvalid, "%q is not a project name", pr)
			}
		}
	}
	if s.Rollout.MaxUnavailable < 0 {
		fe.add("rollout.maxUnavailable", CodeInvalid, "must be at least 1")
	}
	if s.Rollout.BakeSeconds < 0 {
		fe.add("rollout.bakeSeconds", CodeInvalid, "must not be negative")
	}
	if o := s.Rollout.OnFailure; o != "" && o != SidecarOnFailurePause && o != SidecarOnFailureRollback {
		fe.add("rollout.onFailure", CodeUnsupported, "%q is not %s or %s", o, SidecarOnFailurePause, SidecarOnFailureRollback)
	}
	return fe
}

// SidecarControlKey is the key, in bus.BucketSidecars, of the platform
// admins' control of the rollout (SidecarControl), written by the gateway.
const SidecarControlKey = "ctl"

// SidecarProgressKey is the key, in bus.BucketSidecars, of the rollout's
// progress (SidecarProgress), written by admission's rollout controller
// only.
const SidecarProgressKey = "progress"

// SidecarControl is the operators' control of the sidecar rollout.
type SidecarControl struct {
	// Paused holds the rollout: no further workload moves.
	Paused bool `json:"paused,omitempty"`
	// Aborted is a version whose rollout was aborted: no further workload
	// moves to it (those moved keep it) until a newer version is set.
	Aborted int64 `json:"aborted,omitempty"`
	// Reason says why, for the status.
	Reason string `json:"reason,omitempty"`
	// ResumeSeq increases with each resume, which also lifts a pause the
	// health gate took.
	ResumeSeq int `json:"resumeSeq,omitempty"`
}

// Sidecar rollout phases (SidecarProgress.Phase).
const (
	SidecarRolloutProgressing = "Progressing"
	SidecarRolloutPaused      = "Paused"
	SidecarRolloutAborted     = "Aborted"
	SidecarRolloutComplete    = "Complete"
)

// SidecarMove is one workload being moved to the rollout's version.
type SidecarMove struct {
	// Key is the workload's key.
	Key string `json:"key"`
	// From is the version it ran before.
	From int64 `json:"from"`
	// Generation is the workload's generation that carries the new
	// version.
	Generation int64 `json:"generation"`
	// Started is when it was moved.
	Started time.Time `json:"started"`
	// ReadySince is when its pods were first seen all ready on the new
	// version; zero while they are not.
	ReadySince time.Time `json:"readySince,omitzero"`
}

// SidecarProgress is the rollout of the current version: how far it got.
// Its size is bounded by MaxUnavailable, never by the number of
// workloads (the status lists the workloads per version).
type SidecarProgress struct {
	// Version is the version rolling out.
	Version int64 `json:"version"`
	// Phase is one of the SidecarRollout* phases.
	Phase string `json:"phase"`
	// Message says why the rollout is paused.
	Message string `json:"message,omitempty"`
	// Moving are the Apps the open zone is open to and whose pods there
	// are not yet healthy on the new version: at most
	// Rollout.MaxUnavailable.
	Moving []SidecarMove `json:"moving,omitempty"`
	// Done counts the workloads moved and baked.
	Done int `json:"done"`
	// RolledBack counts the workloads returned to their version after
	// failing the health gate.
	RolledBack int `json:"rolledBack,omitempty"`
	// ResumeSeq is the control's ResumeSeq last acted on.
	ResumeSeq int `json:"resumeSeq,omitempty"`
	// Zones are the region's zones in the order the rollout opens them
	// to the new version, one at a time: a zone starts only once the one
	// before it is done and baked.
	Zones []SidecarZone `json:"zones,omitempty"`
	// Updated is when the progress was last written.
	Updated time.Time `json:"updated"`
	// Steps are the events of the progress's last change, published
	// right after it is written; a rollout that stopped in between (a
	// crash, a lost lease) publishes them on its next look, once.
	Steps []SidecarStep `json:"steps,omitempty"`
}

// SidecarStep is one event of the sidecar rollout (the SidecarEvent*
// events of api.SidecarEventProject), Zone empty for the rollout's own.
type SidecarStep struct {
	Event   string `json:"event"`
	Zone    string `json:"zone,omitempty"`
	Message string `json:"message"`
}

// Sidecar rollout zone phases (SidecarZone.Phase).
const (
	// SidecarZonePending: not opened yet; the moved workloads' shards
	// there run their previous version.
	SidecarZonePending = "Pending"
	// SidecarZoneMoving: opened; its pods move to the new version.
	SidecarZoneMoving = "Moving"
	// SidecarZoneBaking: every moved pod there is on the new version and
	// ready, since ReadySince.
	SidecarZoneBaking = "Baking"
	// SidecarZoneDone: baked; the next zone may start.
	SidecarZoneDone = "Done"
	// SidecarZoneFailed: not healthy within the deadline; the rollout is
	// paused there (onFailure Pause), the zone keeping the new version.
	SidecarZoneFailed = "Failed"
	// SidecarZoneRolledBack: failed, and returned to the previous version
	// (onFailure Rollback).
	SidecarZoneRolledBack = "RolledBack"
)

// SidecarZone is the rollout's progress in one zone.
type SidecarZone struct {
	// Name is the zone's.
	Name string `json:"name"`
	// Phase is one of the SidecarZone* phases.
	Phase string `json:"phase"`
	// Started is when the zone was opened to the new version.
	Started time.Time `json:"started,omitzero"`
	// ReadySince is when its moved pods were first seen all ready on the
	// new version; zero while they are not.
	ReadySince time.Time `json:"readySince,omitzero"`
	// Finished is when it was baked, failed or rolled back.
	Finished time.Time `json:"finished,omitzero"`
	// Workloads counts the moved workloads with pods in the zone, and
	// Healthy those whose pods there are all ready on the new version.
	Workloads int `json:"workloads,omitempty"`
	Healthy   int `json:"healthy,omitempty"`
	// Through, while the zone is moving, is the key of the last moved App
	// (in key order) the zone is open to: the Apps after it still run
	// their previous version there (Rollout.MaxUnavailable). Empty when
	// the zone is open to every moved App.
	Through string `json:"through,omitempty"`
	// Advanced is when Through last moved on (or the zone opened): the
	// health gate's deadline counts from it.
	Advanced time.Time `json:"advanced,omitzero"`
}

// OpenTo says whether the zone runs the new version for the App key.
func (z *SidecarZone) OpenTo(key string) bool {
	return z.Open() && (z.Through == "" || key <= z.Through)
}

// Open says whether the zone runs the new version.
func (z *SidecarZone) Open() bool {
	switch z.Phase {
	case SidecarZoneMoving, SidecarZoneBaking, SidecarZoneDone, SidecarZoneFailed:
		return true
	}
	return false
}

// Zone returns the progress of zone, nil when the rollout does not list it.
func (p *SidecarProgress) Zone(zone string) *SidecarZone {
	for i := range p.Zones {
		if p.Zones[i].Name == zone {
			return &p.Zones[i]
		}
	}
	return nil
}

// HeldBack returns the sidecars a shard of w in zone runs while the
// rollout p has not opened that zone: the previous version's
// (Metadata.SidecarPrevious), and true. It returns false when the shard
// runs w's own sidecars: w was not moved by this rollout (a workload
// written during the rollout runs its version in every zone), the
// rollout is complete, or the zone is open.
//
// A workload moved by a rollout whose progress the reader has not seen
// yet (p nil, or of an earlier version: the progress and the workloads
// are separate buckets, and a reader's copy of one may trail the other)
// is held back in every zone until it has. A later version's progress
// (the workload is about to be moved again) holds nothing back.
func (p *SidecarProgress) HeldBack(w *Workload, zone string) ([]Container, bool) {
	prev := w.Metadata.SidecarPrevious
	switch {
	case prev == nil:
		return nil, false
	case p == nil || p.Version < w.Metadata.SidecarVersion:
		return prev.Sidecars, true
	case p.Version != w.Metadata.SidecarVersion || p.Phase == SidecarRolloutComplete:
		return nil, false
	}
	if z := p.Zone(zone); z != nil && z.OpenTo(w.Key()) {
		return nil, false
	}
	return prev.Sidecars, true
}

// SidecarPrevious is what a workload moved by the sidecar rollout ran
// before (Metadata.SidecarPrevious).
type SidecarPrevious struct {
	// Version is the version it ran.
	Version int64 `json:"version"`
	// Sidecars are that version's sidecars for the workload.
	Sidecars []Container `json:"sidecars,omitempty"`
}

// The sidecar rollout's events, published by admission on the subject of
// a pseudo-workload (project
// SidecarEventProject, kind SidecarEventKind), one per step, with the
// version as the event's generation and the zone in its message.
const (
	// SidecarEventProject is the project token of the rollout's event
	// subjects: not a valid project name, so no project's.
	SidecarEventProject = "_platform"
	// SidecarEventKind is the kind token of the rollout's event subjects.
	SidecarEventKind = "SidecarRollout"

	EventSidecarZoneStarted = "sidecar-zone-started"
	EventSidecarZoneBaked   = "sidecar-zone-baked"
	EventSidecarZoneFailed  = "sidecar-zone-failed"
	EventSidecarRolledBack  = "sidecar-rolled-back"
	EventSidecarRolloutDone = "sidecar-rollout-done"
)

// SidecarEventName is the name token of the rollout event for version
// and zone ("" for the whole rollout): "v2-a", "v2".
func SidecarEventName(version int64, zone string) string {
	if zone == "" {
		return "v" + strconv.FormatInt(version, 10)
	}
	return "v" + strconv.FormatInt(version, 10) + "-" + zone
}
