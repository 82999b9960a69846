package api

import (
	"slices"
	"strings"
)

// An App's update strategy (AppSpec.UpdateStrategy) says how the pods of a
// zone take a template change once the zone-by-zone rollout gives the zone
// the new template. With UpdateInPlaceIfPossible, a change of only the
// images of the template's containers (and of nothing else) is patched
// into the live pods: each keeps its UID, and the kubelet restarts only
// the containers whose image changed. Any other change rolls as with
// UpdateRollingUpdate: the shard's Deployment replaces the pods.
// (OpenKruise's CloneSet calls these InPlaceIfPossible and ReCreate.)

// Update strategies.
const (
	// UpdateRollingUpdate replaces pods for every template change (the
	// Deployment's rolling update); the default.
	UpdateRollingUpdate = "RollingUpdate"
	// UpdateInPlaceIfPossible patches image-only changes into live pods.
	UpdateInPlaceIfPossible = "InPlaceIfPossible"
)

// UpdateStrategies lists the update strategies.
var UpdateStrategies = []string{UpdateRollingUpdate, UpdateInPlaceIfPossible}

// InPlace reports whether the App's image-only changes are patched into
// its live pods.
func (s *AppSpec) InPlace() bool { return s.UpdateStrategy == UpdateInPlaceIfPossible }

func validateUpdateStrategy(field, v string, fe *FieldErrors) {
	if v != "" && !slices.Contains(UpdateStrategies, v) {
		fe.add(field, CodeInvalid, "%q: one of %s", v, strings.Join(UpdateStrategies, ", "))
	}
}
