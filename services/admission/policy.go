package admission

import (
	"fmt"
	"slices"
	"sort"
	"strings"

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
// paths, privileged containers, scheduling knobs that escape the tier
// model (checkScheduling), the platform's own sidecars, and a
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
	_, pl := w.Spec.Scheduling()
	return append(fe, checkScheduling(pl)...)
}

// ReservedKeyPrefixes are the node label and taint key prefixes that
// belong to the platform and Kubernetes: a tenant's nodeSelector or
// toleration may not name a key under them. Reserved pools are reached
// by tier only (the propagator sets their selector and toleration).
var ReservedKeyPrefixes = []string{"atoll.dev/", "node-role.kubernetes.io/", "node.kubernetes.io/"}

func reservedKey(k string) bool {
	return slices.ContainsFunc(ReservedKeyPrefixes, func(p string) bool { return strings.HasPrefix(k, p) })
}

// checkScheduling refuses, with 422, a tenant's tolerations without a key
// (operator Exists with an empty key tolerates every taint: cordoned,
// control-plane, Reserved) and nodeSelector or toleration keys under
// ReservedKeyPrefixes. (Placement has no affinity; node affinity is not
// the tenant's to set.)
func checkScheduling(pl *api.Placement) api.FieldErrors {
	var fe api.FieldErrors
	if pl == nil {
		return nil
	}
	keys := make([]string, 0, len(pl.NodeSelector))
	for k := range pl.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if reservedKey(k) {
			fe = append(fe, api.FieldError{Field: "spec.placement.nodeSelector." + k, Code: api.CodeInvalid,
				Reason: fmt.Sprintf("%q is a platform node label (prefixes %s); reserved pools are chosen by tier", k, strings.Join(ReservedKeyPrefixes, ", "))})
		}
	}
	for i, t := range pl.Tolerations {
		p := fmt.Sprintf("spec.placement.tolerations[%d].key", i)
		switch {
		case t.Key == "":
			fe = append(fe, api.FieldError{Field: p, Code: api.CodeInvalid, Reason: "a toleration needs a key: without one it tolerates every taint"})
		case reservedKey(t.Key):
			fe = append(fe, api.FieldError{Field: p, Code: api.CodeInvalid,
				Reason: fmt.Sprintf("%q is a platform taint (prefixes %s); reserved pools are chosen by tier", t.Key, strings.Join(ReservedKeyPrefixes, ", "))})
		}
	}
	return fe
}

// mutate injects the platform's init containers and sidecars: the
// current version of the managed sidecars (sidecars.go), read once, so a
// workload written while a new version rolls out gets one version whole,
// and the version recorded in its metadata.
func (s *Service) mutate(w *api.Workload) {
	t := w.Spec.PodTemplate()
	t.InitContainers = append(append([]api.Container{}, s.cfg.InitContainers...), t.InitContainers...)
	w.Metadata.SidecarVersion, w.Metadata.SidecarPrevious = 0, nil
	v := s.currentSidecars()
	if v == nil {
		t.Sidecars = append([]api.Container{}, s.cfg.Sidecars...)
		return
	}
	t.Sidecars = v.For(w.Kind, w.Metadata.Project)
	w.Metadata.SidecarVersion = v.Version
}
