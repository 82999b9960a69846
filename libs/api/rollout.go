package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// An App's template change rolls out one zone at a time (see
// services/aggregator/rollout for the state machine and who runs it).
// RolloutStrategy is how, set in the App's spec; Rollout is the committed
// progress, one document per App; RolloutControl is what the rollout
// operations (pause, resume, undo) record in the workload.

// Rollout failure policies: what a zone that fails does.
const (
	// RolloutPause stops the rollout where it is; the failed zone keeps
	// the new template until a resume (which retries it) or an undo.
	RolloutPause = "Pause"
	// RolloutRollbackZone pauses and returns the failed zone to the
	// stable template; zones already done keep the new one.
	RolloutRollbackZone = "RollbackZone"
	// RolloutRollbackAll returns every zone to the stable template and
	// ends the rollout (as an undo does).
	RolloutRollbackAll = "RollbackAll"
)

// RolloutPolicies lists the failure policies.
var RolloutPolicies = []string{RolloutPause, RolloutRollbackZone, RolloutRollbackAll}

// Rollout defaults.
const (
	DefaultRolloutBake     = 10 * time.Second
	DefaultRolloutDeadline = 10 * time.Minute
)

// RolloutStrategy is how an App's template changes roll out across zones.
type RolloutStrategy struct {
	// Order is the zones in rollout order; zones not named follow in
	// sorted order. Empty: the zones' sorted order.
	Order []string `json:"order,omitempty"`
	// BakeSeconds is how long a zone must stay fully available on the new
	// template before the next zone starts (default 10).
	BakeSeconds *int32 `json:"bakeSeconds,omitempty"`
	// DeadlineSeconds is how long a zone may take to become fully
	// available before it counts as failed (default 600).
	DeadlineSeconds *int32 `json:"deadlineSeconds,omitempty"`
	// OnFailure is Pause, RollbackZone or RollbackAll (default Pause).
	OnFailure string `json:"onFailure,omitempty"`
}

// Bake returns the bake time (the default when s is nil or unset).
func (s *RolloutStrategy) Bake() time.Duration {
	if s == nil || s.BakeSeconds == nil {
		return DefaultRolloutBake
	}
	return time.Duration(*s.BakeSeconds) * time.Second
}

// Deadline returns the per-zone deadline (the default when unset).
func (s *RolloutStrategy) Deadline() time.Duration {
	if s == nil || s.DeadlineSeconds == nil {
		return DefaultRolloutDeadline
	}
	return time.Duration(*s.DeadlineSeconds) * time.Second
}

// Policy returns the failure policy (the default when unset).
func (s *RolloutStrategy) Policy() string {
	if s == nil || s.OnFailure == "" {
		return RolloutPause
	}
	return s.OnFailure
}

// ZoneOrder returns zones in rollout order: those named in Order first, in
// that order, then the rest sorted. Order entries that are not among
// zones are left out.
func (s *RolloutStrategy) ZoneOrder(zones []string) []string {
	rest := slices.Clone(zones)
	slices.Sort(rest)
	rest = slices.Compact(rest)
	var out []string
	if s != nil {
		for _, z := range s.Order {
			if i := slices.Index(rest, z); i >= 0 && !slices.Contains(out, z) {
				out = append(out, z)
				rest = slices.Delete(rest, i, i+1)
			}
		}
	}
	return append(out, rest...)
}

func (s *RolloutStrategy) validate(field string, fe *FieldErrors) {
	if s == nil {
		return
	}
	seen := map[string]bool{}
	for i, z := range s.Order {
		f := field + ".order[" + strconv.Itoa(i) + "]"
		switch {
		case z == "":
			fe.add(f, CodeRequired, "zone name is empty")
		case seen[z]:
			fe.add(f, CodeInvalid, "zone %q appears twice", z)
		}
		seen[z] = true
	}
	if s.BakeSeconds != nil && (*s.BakeSeconds < 0 || *s.BakeSeconds > 86400) {
		fe.add(field+".bakeSeconds", CodeInvalid, "%d is not between 0 and 86400", *s.BakeSeconds)
	}
	if s.DeadlineSeconds != nil && (*s.DeadlineSeconds < 1 || *s.DeadlineSeconds > 86400) {
		fe.add(field+".deadlineSeconds", CodeInvalid, "%d is not between 1 and 86400", *s.DeadlineSeconds)
	}
	if s.OnFailure != "" && !slices.Contains(RolloutPolicies, s.OnFailure) {
		fe.add(field+".onFailure", CodeInvalid, "%q: one of Pause, RollbackZone, RollbackAll", s.OnFailure)
	}
}

// TemplateHash identifies a pod template: what a zone runs. Two templates
// with the same hash render the same pods.
func TemplateHash(t *PodTemplate) string {
	body, err := json.Marshal(t)
	if err != nil {
		return "unhashable"
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:8])
}

// Rollout phases.
const (
	// RolloutComplete: every zone runs the stable template; nothing to do.
	RolloutComplete = "Complete"
	// RolloutProgressing: zones are moving to the target, one at a time.
	RolloutProgressing = "Progressing"
	// RolloutPaused: stopped by a user or by a failed zone.
	RolloutPaused = "Paused"
	// RolloutRolledBack: every zone was returned to the stable template;
	// the target is abandoned until the spec changes again.
	RolloutRolledBack = "RolledBack"
)

// Zone rollout states.
const (
	ZonePending    = "Pending"    // still on the stable template, not started
	ZoneUpdating   = "Updating"   // given the target, not fully available yet
	ZoneBaking     = "Baking"     // fully available on the target, baking
	ZoneDone       = "Done"       // baked
	ZoneFailed     = "Failed"     // missed its deadline or crash-looped
	ZoneRolledBack = "RolledBack" // returned to the stable template after a failure
)

// Rollout events, on atoll.evt.<project>.app.<name>.<event>.
const (
	EventRolloutZoneStarted = "rollout-zone-started"
	EventRolloutZoneDone    = "rollout-zone-done"
	EventRolloutPaused      = "rollout-paused"
	EventRolloutRolledBack  = "rollout-rolled-back"
)

// ZoneRollout is one zone's part of a rollout.
type ZoneRollout struct {
	Zone string `json:"zone"`
	// State is one of the Zone* states.
	State string `json:"state"`
	// Revision is the template hash the zone's shards must run: the
	// rollout's Stable or Target.
	Revision string `json:"revision"`
	// Started is when the zone was given the target.
	Started time.Time `json:"started,omitzero"`
	// AvailableSince is when the zone became fully available on the
	// target, zero while it is not.
	AvailableSince time.Time `json:"availableSince,omitzero"`
	// Finished is when the zone was done, failed or rolled back.
	Finished time.Time `json:"finished,omitzero"`
	// Message says why a zone failed.
	Message string `json:"message,omitempty"`
}

// Rollout is an App's committed rollout progress.
type Rollout struct {
	// Key is the workload's key.
	Key string `json:"key"`
	// Phase is one of the Rollout* phases.
	Phase string `json:"phase"`
	// Stable is the hash of the template every zone ran before the
	// rollout (after it completes: the target).
	Stable string `json:"stable"`
	// StableTemplate is that template: what zones not (or no longer) on
	// the target are rendered with.
	StableTemplate *PodTemplate `json:"stableTemplate,omitempty"`
	// Target is the hash of the spec's template being rolled out; empty
	// when complete.
	Target string `json:"target,omitempty"`
	// Abandoned is a target that was rolled back: it does not start again
	// until the spec's template changes.
	Abandoned string `json:"abandoned,omitempty"`
	// Zones are the zones in rollout order.
	Zones []ZoneRollout `json:"zones,omitempty"`
	// Message says why the rollout is paused or rolled back.
	Message string `json:"message,omitempty"`
	// Seq numbers the rollout's state changes; events carry it so each
	// is published once per change.
	Seq uint64 `json:"seq"`
	// Events are the events of change Seq.
	Events []RolloutEvent `json:"events,omitempty"`
	// Handled is the last rollout operation time (RolloutControl) acted on.
	Handled time.Time `json:"handled,omitzero"`
	// Updated is when the document was last written.
	Updated time.Time `json:"updated,omitzero"`
}

// RolloutEvent is one event of a rollout's latest change, kept in the
// document so that it is published after the change is committed, and
// again (deduplicated) after a crash.
type RolloutEvent struct {
	Event   string `json:"event"`
	Zone    string `json:"zone,omitempty"`
	Message string `json:"message"`
}

// Zone returns the zone's part of the rollout, nil when not in it.
func (r *Rollout) Zone(zone string) *ZoneRollout {
	for i := range r.Zones {
		if r.Zones[i].Zone == zone {
			return &r.Zones[i]
		}
	}
	return nil
}

// TemplateFor returns the template a shard in zone runs: the spec's when
// it is the stable template or the zone was given it, else the stable
// template. Without a rollout document (a new App), the spec's. So a spec
// change reaches no zone before the rollout controller gives it to one.
func (r *Rollout) TemplateFor(zone string, spec *PodTemplate) *PodTemplate {
	if r == nil || r.StableTemplate == nil {
		return spec
	}
	h := TemplateHash(spec)
	if h == r.Stable {
		return spec
	}
	if z := r.Zone(zone); z != nil && z.Revision == h {
		return spec
	}
	return r.StableTemplate
}

// RolloutControl is what the rollout operations record on a workload:
// user intent the rollout controller acts on.
type RolloutControl struct {
	// Paused holds the rollout where it is.
	Paused bool `json:"paused,omitempty"`
	// At is when the last rollout operation was made.
	At time.Time `json:"at,omitzero"`
	// Op is that operation (rollout-pause, rollout-resume, rollout-undo).
	Op string `json:"op,omitempty"`
}

// Rollout operations (Operation.Op).
const (
	OpRolloutPause  = "rollout-pause"
	OpRolloutResume = "rollout-resume"
	OpRolloutUndo   = "rollout-undo"
)

// AnnoTemplate on an App's Deployment is the TemplateHash of the template
// it runs, so the rollout controller can tell which revision a zone has.
const AnnoTemplate = "atoll.dev/template"

// validatePodLabels checks a pod template's labels: label syntax, and
// none of the platform's own (atoll.dev/), which find and select pods.
func validatePodLabels(field string, m map[string]string, fe *FieldErrors) {
	validateLabels(field, m, fe)
	for k := range m {
		if strings.HasPrefix(k, "atoll.dev/") {
			fe.add(field+"."+k, CodeInvalid, "labels under atoll.dev/ are the platform's")
		}
	}
}
