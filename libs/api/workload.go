// Package api is Atoll's workload model: the Workload envelope, the specs of
// each kind, their validation and defaults, placement and status documents,
// and how they are keyed in the region's buckets.
package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// APIVersion is the version of the workload documents.
const APIVersion = "atoll.dev/v1"

// Tier says how a workload's resources are guaranteed.
type Tier string

// Tiers.
const (
	TierReserved    Tier = "Reserved"
	TierOnDemand    Tier = "OnDemand"
	TierPreemptible Tier = "Preemptible"
)

// Tiers lists the tiers in priority order.
var Tiers = []Tier{TierReserved, TierOnDemand, TierPreemptible}

// Metadata identifies a workload.
type Metadata struct {
	// Project owns the workload; a DNS label.
	Project string `json:"project"`
	// Name is unique per project and kind; a DNS label.
	Name string `json:"name"`
	// Labels are the user's labels, copied onto every native object.
	Labels map[string]string `json:"labels,omitempty"`
	// Generation increases with every accepted spec change (set by admission).
	Generation int64 `json:"generation,omitempty"`
	// UID is assigned at creation and never changes (set by admission).
	UID string `json:"uid,omitempty"`
	// Created is when the workload was first admitted (set by admission).
	Created time.Time `json:"created,omitzero"`
	// Updated is when the spec was last admitted (set by admission).
	Updated time.Time `json:"updated,omitzero"`
	// Event is the domain event that opened this generation (admitted,
	// updated, scaled, paused, ...; set by admission), so it is published
	// even when the process that wrote the generation died before it could.
	Event string `json:"event,omitempty"`
	// EventMessage is that event's message.
	EventMessage string `json:"eventMessage,omitempty"`
	// SidecarVersion is the version of the platform's managed sidecars
	// (SidecarVersion) the workload's pods run, 0 when they come from
	// admission's own configuration (set by admission).
	SidecarVersion int64 `json:"sidecarVersion,omitempty"`
	// SidecarPrevious is, on a workload the sidecar rollout moved to
	// SidecarVersion, the version it ran before and that version's
	// sidecars: what its shards in the zones the rollout has not opened
	// yet keep running (SidecarProgress.HeldBack). Nil on a workload
	// written by its owner (set by admission).
	SidecarPrevious *SidecarPrevious `json:"sidecarPrevious,omitempty"`
}

// Workload is one object of a primitive kind.
type Workload struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	// Spec is the kind's spec (*AppSpec, *JobSetSpec, *PodSpec, ...).
	Spec Spec `json:"spec"`
	// Control is what operations (pause, stop, restart, ...) set; see Operation.
	Control Control `json:"control,omitzero"`
}

// Key returns the workload's key in the workloads, placements and status
// buckets: <project>.<kind>.<name>, kind lower-cased.
func (w *Workload) Key() string { return Key(w.Metadata.Project, w.Kind, w.Metadata.Name) }

// Key builds a workload key.
func Key(project, kind, name string) string {
	return project + "." + strings.ToLower(kind) + "." + name
}

// ParseKey splits a workload key into project, kind (as registered) and name.
func ParseKey(key string) (project, kind, name string, err error) {
	parts := strings.Split(key, ".")
	if len(parts) != 3 {
		return "", "", "", fmt.Errorf("workload key %q: want project.kind.name", key)
	}
	k, ok := kindByLower[parts[1]]
	if !ok {
		return "", "", "", fmt.Errorf("workload key %q: unknown kind %q", key, parts[1])
	}
	return parts[0], k, parts[2], nil
}

// UnmarshalJSON decodes the envelope, then the spec into the kind's type,
// rejecting unknown fields everywhere.
func (w *Workload) UnmarshalJSON(b []byte) error {
	var env struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   Metadata        `json:"metadata"`
		Spec       json.RawMessage `json:"spec"`
		Control    Control         `json:"control"`
	}
	if err := strictDecode(b, &env); err != nil {
		return err
	}
	w.APIVersion, w.Kind, w.Metadata, w.Spec, w.Control = env.APIVersion, env.Kind, env.Metadata, nil, env.Control
	k, ok := kinds[env.Kind]
	if !ok {
		return &FieldErrors{{Field: "kind", Code: CodeUnsupported, Reason: fmt.Sprintf("unknown kind %q; one of %s", env.Kind, strings.Join(KindNames(), ", "))}}
	}
	spec := k.New()
	if len(env.Spec) > 0 && !bytes.Equal(env.Spec, []byte("null")) {
		if err := strictDecode(env.Spec, spec); err != nil {
			return prefixDecodeError("spec", err)
		}
	}
	w.Spec = spec
	return nil
}

// Decode parses a workload document, rejecting unknown fields and type
// errors as FieldErrors.
func Decode(b []byte) (*Workload, error) {
	var w Workload
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, asFieldErrors(err)
	}
	return &w, nil
}

func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the document")
	}
	return nil
}

// Kind describes one primitive kind: its spec and its capabilities. The
// kinds are the literal table in registry (kinds.go).
type Kind struct {
	// Name is the kind as written in documents (App, JobSet, Pod, ...).
	Name string
	// New returns an empty spec of the kind.
	New func() Spec
	// Unplaced marks a kind the scheduler never places (a Scaler is a
	// policy another service acts on): the scheduler, the propagator and
	// the aggregator's folders leave it alone.
	Unplaced bool
	// AdminOnly marks a kind only platform admins may create (a Daemon):
	// admission refuses it to anyone else with 403.
	AdminOnly bool
	// EveryCluster marks a kind placed in every member cluster that passes
	// its filters (a Daemon), not in a count of them.
	EveryCluster bool
	// NoPods marks a kind that runs no pods of its own (a Scaler): it has
	// no logs, no exec and no replica counts to show.
	NoPods bool
	// Ops are the operations (of Ops) that apply to the kind, in the order
	// of Ops: a Pod cannot scale, only an App rolls out zone by zone.
	Ops []string
	// Paused says what pausing the kind does, for the paused event (empty
	// when pause does not apply).
	Paused string
	// Claims marks a kind whose pod template may carry
	// volumeClaimTemplates (claims.go): validation refuses them elsewhere.
	Claims bool
}

// Supports reports whether op applies to k.
func (k Kind) Supports(op string) bool { return slices.Contains(k.Ops, op) }

var (
	// kinds is registry's table, by name; never written after init.
	kinds = registry()
	// kindByLower maps a lower-cased kind to its name.
	kindByLower = lowerNames(kinds)
)

func lowerNames(m map[string]Kind) map[string]string {
	out := make(map[string]string, len(m))
	for n := range m {
		out[strings.ToLower(n)] = n
	}
	return out
}

// Kinds lists the registered kinds, sorted by name. The caller may change
// the slices it gets.
func Kinds() []Kind {
	out := make([]Kind, 0, len(kinds))
	for _, n := range KindNames() {
		k := kinds[n]
		k.Ops = slices.Clone(k.Ops)
		out = append(out, k)
	}
	return out
}

// LookupKind returns the kind named name in any case (app, App, APP).
func LookupKind(name string) (Kind, bool) {
	n, ok := kindByLower[strings.ToLower(name)]
	if !ok {
		return Kind{}, false
	}
	k := kinds[n]
	k.Ops = slices.Clone(k.Ops)
	return k, true
}

// KindNames lists the registered kinds, sorted.
func KindNames() []string {
	return slices.Sorted(maps.Keys(kinds))
}

// PlacedKindNames lists the registered kinds the scheduler places, sorted.
func PlacedKindNames() []string {
	names := make([]string, 0, len(kinds))
	for n, k := range kinds {
		if !k.Unplaced {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// AdminOnly reports whether only platform admins may create kind.
func AdminOnly(kind string) bool { return kinds[kind].AdminOnly }

// EveryCluster reports whether kind is placed in every matching cluster.
func EveryCluster(kind string) bool { return kinds[kind].EveryCluster }

// Placed reports whether kind is registered and placed by the scheduler.
func Placed(kind string) bool {
	k, ok := kinds[kind]
	return ok && !k.Unplaced
}

// Spec is what every kind's spec provides to the platform's services.
type Spec interface {
	// Default fills unset fields.
	Default()
	// Validate reports every problem, with field paths under "spec".
	Validate() FieldErrors
	// PodTemplate returns the pod template every pod of the workload runs.
	PodTemplate() *PodTemplate
	// Scheduling returns the tier and placement constraints.
	Scheduling() (Tier, *Placement)
	// Pods is how many pods run at once (replicas, parallelism, 1).
	Pods() int32
}

// Demand is what a workload reserves against its project's quota.
type Demand struct {
	Tier Tier `json:"tier"`
	// MilliCPU, MemoryBytes and GPUs are totals over Pods pods.
	MilliCPU    int64 `json:"milliCPU"`
	MemoryBytes int64 `json:"memoryBytes"`
	GPUs        int64 `json:"gpus"`
	Pods        int64 `json:"pods"`
	// StorageBytes is the storage the workload requests: its pods'
	// emptyDir size limits and claim templates, and its persistent
	// volume claims.
	StorageBytes int64 `json:"storageBytes,omitempty"`
}

// ClaimsStorage is a Spec whose workload claims persistent storage
// beside its pods' scratch volumes (a Pod's volume).
type ClaimsStorage interface {
	// ClaimBytes is the total size of the workload's claims.
	ClaimBytes() int64
}

// DemandOf totals the requests of a workload's pods (containers, plus
// sidecars, which run alongside them), and the storage it requests.
func DemandOf(w *Workload) Demand {
	tier, _ := w.Spec.Scheduling()
	t := w.Spec.PodTemplate()
	per := t.PodRequests()
	n := int64(w.Spec.Pods())
	d := Demand{Tier: tier, MilliCPU: per.MilliCPU * n, MemoryBytes: per.MemoryBytes * n, GPUs: per.GPUs * n, Pods: n,
		StorageBytes: (t.ScratchBytes() + t.ClaimBytesPerPod()) * n}
	if c, ok := w.Spec.(ClaimsStorage); ok {
		d.StorageBytes += c.ClaimBytes()
	}
	return d
}

// DecodeYAML parses one workload written in YAML.
func DecodeYAML(b []byte) (*Workload, error) {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, FieldErrors{{Code: CodeInvalid, Reason: fmt.Sprintf("malformed YAML: %v", err)}}
	}
	return Decode(j)
}
