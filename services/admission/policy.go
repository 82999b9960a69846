package admission

import (
	"fmt"

	"atoll.dev/libs/api"
)

// Principal is who asks.
type Principal struct {
	// Name identifies the caller, for the record.
	Name string
	// PlatformAdmin callers may run host-level workloads.
	PlatformAdmin bool
}

// checkPolicy reports what a tenant may not ask for: host network, host
// paths, privileged containers, the platform's own sidecars, and a
// workload's control (set by operations; a platform admin's document may
// carry one, which then replaces the stored one).
func checkPolicy(w *api.Workload, p Principal) api.FieldErrors {
	var fe api.FieldErrors
	t := w.Spec.PodTemplate()
	if len(t.Sidecars) > 0 {
		fe = append(fe, api.FieldError{Field: "spec.template.sidecars", Code: api.CodeForbidden, Reason: "sidecars are managed by the platform and cannot be set"})
	}
	if p.PlatformAdmin {
		return fe
	}
	if api.AdminOnly(w.Kind) {
		fe = append(fe, api.FieldError{Field: "kind", Code: api.CodeForbidden, Reason: fmt.Sprintf("a %s is for platform admins only", w.Kind)})
	}
	if !w.Control.IsZero() {
		fe = append(fe, api.FieldError{Field: "control", Code: api.CodeForbidden, Reason: "control is set through operations (pause, resume, stop, start, restart, scale), not in the document"})
	}
	if t.HostNetwork {
		fe = append(fe, api.FieldError{Field: "spec.template.hostNetwork", Code: api.CodeForbidden, Reason: "host network is not allowed for tenant workloads"})
	}
	for i, v := range t.Volumes {
		if v.HostPath != "" {
			fe = append(fe, api.FieldError{Field: fmt.Sprintf("spec.template.volumes[%d].hostPath", i), Code: api.CodeForbidden, Reason: "host paths are not allowed for tenant workloads"})
		}
	}
	for _, set := range []struct {
		name string
		cs   []api.Container
	}{{"containers", t.Containers}, {"initContainers", t.InitContainers}} {
		for i, c := range set.cs {
			if c.Privileged {
				fe = append(fe, api.FieldError{Field: fmt.Sprintf("spec.template.%s[%d].privileged", set.name, i), Code: api.CodeForbidden, Reason: "privileged containers are not allowed for tenant workloads"})
			}
		}
	}
	return fe
}

// mutate injects the platform's init containers and sidecars.
func (s *Service) mutate(w *api.Workload) {
	t := w.Spec.PodTemplate()
	t.InitContainers = append(append([]api.Container{}, s.cfg.InitContainers...), t.InitContainers...)
	t.Sidecars = append([]api.Container{}, s.cfg.Sidecars...)
}
