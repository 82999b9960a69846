package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Control is what operations set on a workload apart from its spec. Users
// cannot write it through submit or update: admission keeps the stored
// value (a document that sets it is refused unless a platform admin sent it).
type Control struct {
	// Paused keeps an App's Deployments at zero replicas and suspends a
	// JobSet's Jobs; the placement and the quota stay.
	Paused bool `json:"paused,omitempty"`
	// Stopped removes every native object of the workload (the scheduler
	// places no shards) and gives its quota back until it is started.
	Stopped bool `json:"stopped,omitempty"`
	// RestartedAt restarts every pod (rolling for Apps) when it changes.
	RestartedAt time.Time `json:"restartedAt,omitzero"`
	// ContainerRestarts restarts one container by name when its time
	// changes. Kubernetes has no API to restart one container of a running
	// pod, so this rolls the pods like RestartedAt does, triggered by that
	// container; what is recorded is the per-container intent (which
	// container and when), visible on the pod template as its own
	// annotation (see ContainerRestartAnnotation).
	ContainerRestarts map[string]time.Time `json:"containerRestarts,omitempty"`
	// Rollout is what the rollout operations (pause, resume, undo of an
	// App's zone-by-zone rollout) asked; see RolloutControl.
	Rollout *RolloutControl `json:"rollout,omitempty"`
}

// IsZero reports whether no operation has set anything (omitzero uses it).
func (c Control) IsZero() bool {
	return !c.Paused && !c.Stopped && c.RestartedAt.IsZero() && len(c.ContainerRestarts) == 0 && c.Rollout == nil
}

// Clone returns a copy whose map can be changed without touching c.
func (c Control) Clone() Control {
	c.ContainerRestarts = maps.Clone(c.ContainerRestarts)
	if c.Rollout != nil {
		r := *c.Rollout
		c.Rollout = &r
	}
	return c
}

// Annotations on pod templates (Pods: on the Pod) that carry restarts.
const (
	// AnnoRestartedAt holds Control.RestartedAt (RFC 3339, nanoseconds).
	AnnoRestartedAt = "atoll.dev/restarted-at"
	// AnnoRestartPrefix starts the annotation of one container's restart.
	AnnoRestartPrefix = "atoll.dev/restart."
)

// ContainerRestartAnnotation is the annotation that carries a restart of
// container: atoll.dev/restart.<container>. The name part of an annotation
// key holds at most 63 characters, so a container name longer than 55 is
// cut and suffixed with a hash of the whole name, keeping keys distinct.
func ContainerRestartAnnotation(container string) string {
	const room = 63 - len("restart.")
	if len(container) <= room {
		return AnnoRestartPrefix + container
	}
	sum := sha256.Sum256([]byte(container))
	h := hex.EncodeToString(sum[:])[:8]
	return AnnoRestartPrefix + strings.TrimRight(container[:room-len(h)-1], "-") + "-" + h
}

// RestartAnnotations returns the annotations that carry c's restarts, or
// nil when nothing was ever restarted.
func (c Control) RestartAnnotations() map[string]string {
	if c.RestartedAt.IsZero() && len(c.ContainerRestarts) == 0 {
		return nil
	}
	out := make(map[string]string, 1+len(c.ContainerRestarts))
	if !c.RestartedAt.IsZero() {
		out[AnnoRestartedAt] = c.RestartedAt.UTC().Format(time.RFC3339Nano)
	}
	for name, at := range c.ContainerRestarts {
		out[ContainerRestartAnnotation(name)] = at.UTC().Format(time.RFC3339Nano)
	}
	return out
}

// Operations on a workload, the values of Operation.Op.
const (
	OpPause            = "pause"
	OpResume           = "resume"
	OpStop             = "stop"
	OpStart            = "start"
	OpRestart          = "restart"
	OpRestartContainer = "restart-container"
	OpScale            = "scale"
)

// Ops lists every operation.
var Ops = []string{OpPause, OpResume, OpStop, OpStart, OpRestart, OpRestartContainer, OpScale, OpRolloutPause, OpRolloutResume, OpRolloutUndo}

// Operation is the body of atoll.req.admission.operate (and of the
// autoscaler's atoll.req.admission.autoscale): one operation on
// one stored workload.
type Operation struct {
	Project string `json:"project"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	// Op is one of Ops.
	Op string `json:"op"`
	// Container names the container of a restart-container.
	Container string `json:"container,omitempty"`
	// Replicas is a scale's new size: an App's replicas, a JobSet's
	// parallelism. A Pod cannot scale.
	Replicas *int32 `json:"replicas,omitempty"`
}

// Validate checks what an operation can be checked for without the
// workload it names, returning every problem.
func (o *Operation) Validate() FieldErrors {
	var fe FieldErrors
	if code, reason, ok := CheckProject(o.Project); !ok {
		fe.add("project", code, "%s", reason)
	}
	if _, ok := kinds[o.Kind]; !ok {
		fe.add("kind", CodeUnsupported, "unknown kind %q; one of %s", o.Kind, strings.Join(KindNames(), ", "))
	}
	if o.Name == "" {
		fe.add("name", CodeRequired, "name is required")
	} else if !IsDNSLabel(o.Name) {
		fe.add("name", CodeInvalid, "%q is not a DNS label", o.Name)
	}
	switch o.Op {
	case OpRestartContainer:
		if o.Container == "" {
			fe.add("container", CodeRequired, "restart-container needs the name of the container")
		}
	case OpScale:
		switch {
		case o.Replicas == nil:
			fe.add("replicas", CodeRequired, "scale needs replicas")
		case *o.Replicas < 0 || *o.Replicas > MaxReplicas:
			fe.add("replicas", CodeInvalid, "%d is not between 0 and %d", *o.Replicas, MaxReplicas)
		}
	case OpPause, OpResume, OpStop, OpStart, OpRestart, OpRolloutPause, OpRolloutResume, OpRolloutUndo:
	case "":
		fe.add("op", CodeRequired, "op is required; one of %s", strings.Join(Ops, ", "))
	default:
		fe.add("op", CodeUnsupported, "unknown operation %q; one of %s", o.Op, strings.Join(Ops, ", "))
	}
	if o.Op != OpRestartContainer && o.Container != "" {
		fe.add("container", CodeInvalid, "container is only for %s", OpRestartContainer)
	}
	if o.Op != OpScale && o.Replicas != nil {
		fe.add("replicas", CodeInvalid, "replicas is only for %s", OpScale)
	}
	return fe
}

// CheckKind reports an operation that does not apply to its kind (see
// Kind.Ops) as a field error on "op" with CodeUnsupported, or nothing when
// it applies or when the kind or the operation is unknown (Validate
// reports those). It is apart from Validate because the two answer
// differently: a malformed operation is a 400, an operation the kind does
// not support a 409 (admission).
func (o *Operation) CheckKind() FieldErrors {
	k, ok := kinds[o.Kind]
	if !ok || !slices.Contains(Ops, o.Op) || k.Supports(o.Op) {
		return nil
	}
	has := "it has no operations"
	if len(k.Ops) > 0 {
		has = "its operations are " + strings.Join(k.Ops, ", ")
	}
	var fe FieldErrors
	fe.add("op", CodeUnsupported, "a %s cannot be %s; %s", o.Kind, opPhrase[o.Op], has)
	return fe
}

// opPhrase says what each operation does, as "a Pod cannot be ...".
var opPhrase = map[string]string{
	OpPause: "paused or resumed", OpResume: "paused or resumed",
	OpStop: "stopped or started", OpStart: "stopped or started",
	OpRestart: "restarted", OpRestartContainer: "restarted",
	OpScale:        "scaled",
	OpRolloutPause: "rolled out zone by zone (only an App is)", OpRolloutResume: "rolled out zone by zone (only an App is)",
	OpRolloutUndo: "rolled out zone by zone (only an App is)",
}

// String names the operation for logs and messages.
func (o *Operation) String() string {
	return fmt.Sprintf("%s %s/%s/%s", o.Op, o.Project, o.Kind, o.Name)
}
