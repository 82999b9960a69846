package api

import (
	"time"
)

// KindTrainingJob is distributed training (PyTorch or TensorFlow style):
// a gang of Workers pods placed whole in ONE member cluster that has room
// for every worker (never split across clusters), where it becomes an
// Indexed Job (completions = parallelism = workers) and a headless
// Service, so that worker i is reachable as <name>-<i>.<name>. Every pod
// is told its rank, the world size and the master's address and port in
// its environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, the PET_*
// names torchrun reads, and optionally TF_CONFIG).
//
// The gang is admitted as a whole, in the shape of Kueue's
// waitForPodsReady: if its workers are not all Running within
// ReadyTimeoutSeconds of its placement, the scheduler takes it down (its
// placement emptied, so the propagator removes the Job and the Service),
// releases its quota and requeues it with exponential backoff (Backoff);
// it reserves the quota again before it places it again. A failed worker
// fails the whole gang (FailGang) or has the whole gang recreated up to
// MaxRestarts times (RestartGang). See services/scheduler/kind_training.go.
const KindTrainingJob = "TrainingJob"

// Defaults and bounds of a TrainingJob.
const (
	DefaultMasterPort          = 29500
	DefaultReadyTimeoutSeconds = 300
	DefaultBackoffBaseSeconds  = 10
	DefaultBackoffMaxSeconds   = 600
	DefaultMaxRestarts         = 3
	// MaxWorkers bounds a gang: it must fit in one member cluster.
	MaxWorkers = 1000
)

// Failure policies of a TrainingJob (GangFailurePolicy.Policy).
const (
	// GangFail: a failed worker fails the TrainingJob.
	GangFail = "FailGang"
	// GangRestart: a failed worker has the whole gang recreated, up to
	// MaxRestarts times; then the TrainingJob fails.
	GangRestart = "RestartGang"
)

// Events of a TrainingJob's gang.
const (
	// EventGangTimeout: the gang was not all Running within its ready
	// timeout and was taken down.
	EventGangTimeout = "gang-timeout"
	// EventRequeued: a gang taken down waits (backoff) to be placed again.
	EventRequeued = "requeued"
	// EventGangRestarted: a worker failed and the whole gang is recreated.
	EventGangRestarted = "gang-restarted"
)

// AnnoGangAttempt on a TrainingJob's pod template is the placement attempt
// (GangState.Attempt) it belongs to: a new attempt is a new pod template,
// so the Job is recreated whole.
const AnnoGangAttempt = "atoll.dev/gang-attempt"

// TrainingJobSpec is a TrainingJob.
type TrainingJobSpec struct {
	Common
	// Workers is the gang's size (required, at least 1): the world size.
	Workers int32 `json:"workers"`
	// MasterPort is the port rank 0 listens on (default DefaultMasterPort).
	MasterPort int32 `json:"masterPort,omitempty"`
	// TFConfig adds TF_CONFIG (TensorFlow's cluster spec) to every pod.
	TFConfig bool `json:"tfConfig,omitempty"`
	// ReadyTimeoutSeconds is how long after its placement the gang may
	// take to be all Running before it is taken down and requeued
	// (default DefaultReadyTimeoutSeconds).
	ReadyTimeoutSeconds int32 `json:"readyTimeoutSeconds,omitempty"`
	// Backoff is the requeue delay after a timeout: BaseSeconds doubled
	// with each requeue, at most MaxSeconds.
	Backoff *GangBackoff `json:"backoff,omitempty"`
	// FailurePolicy is what a failed worker does to the gang.
	FailurePolicy *GangFailurePolicy `json:"failurePolicy,omitempty"`
}

// GangBackoff is an exponential requeue delay.
type GangBackoff struct {
	// BaseSeconds is the first delay (default DefaultBackoffBaseSeconds).
	BaseSeconds int32 `json:"baseSeconds,omitempty"`
	// MaxSeconds caps the delay (default DefaultBackoffMaxSeconds).
	MaxSeconds int32 `json:"maxSeconds,omitempty"`
}

// GangFailurePolicy says what a failed worker does to the gang.
type GangFailurePolicy struct {
	// Policy is FailGang (default) or RestartGang.
	Policy string `json:"policy,omitempty"`
	// MaxRestarts bounds RestartGang's recreations (default DefaultMaxRestarts).
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`
}

// Default implements Spec.
func (s *TrainingJobSpec) Default() {
	s.defaults()
	if s.MasterPort == 0 {
		s.MasterPort = DefaultMasterPort
	}
	if s.ReadyTimeoutSeconds == 0 {
		s.ReadyTimeoutSeconds = DefaultReadyTimeoutSeconds
	}
	if s.Backoff == nil {
		s.Backoff = &GangBackoff{}
	}
	if s.Backoff.BaseSeconds == 0 {
		s.Backoff.BaseSeconds = DefaultBackoffBaseSeconds
	}
	if s.Backoff.MaxSeconds == 0 {
		s.Backoff.MaxSeconds = max(DefaultBackoffMaxSeconds, s.Backoff.BaseSeconds)
	}
	if s.FailurePolicy == nil {
		s.FailurePolicy = &GangFailurePolicy{}
	}
	if s.FailurePolicy.Policy == "" {
		s.FailurePolicy.Policy = GangFail
	}
	if s.FailurePolicy.MaxRestarts == nil {
		n := int32(DefaultMaxRestarts)
		s.FailurePolicy.MaxRestarts = &n
	}
}

// Validate implements Spec.
func (s *TrainingJobSpec) Validate() FieldErrors {
	var fe FieldErrors
	s.validate(&fe)
	switch {
	case s.Workers == 0:
		fe.add("spec.workers", CodeRequired, "workers is required (at least 1)")
	case s.Workers < 0 || s.Workers > MaxWorkers:
		fe.add("spec.workers", CodeInvalid, "%d is not between 1 and %d", s.Workers, MaxWorkers)
	}
	if s.MasterPort < 0 || s.MasterPort > 65535 {
		fe.add("spec.masterPort", CodeInvalid, "%d is not a port (1 to 65535)", s.MasterPort)
	}
	if s.ReadyTimeoutSeconds < 0 || s.ReadyTimeoutSeconds > 86400 {
		fe.add("spec.readyTimeoutSeconds", CodeInvalid, "%d is not between 1 and 86400", s.ReadyTimeoutSeconds)
	}
	if b := s.Backoff; b != nil {
		if b.BaseSeconds < 0 || b.BaseSeconds > 86400 {
			fe.add("spec.backoff.baseSeconds", CodeInvalid, "%d is not between 1 and 86400", b.BaseSeconds)
		}
		if b.MaxSeconds < 0 || b.MaxSeconds > 86400 {
			fe.add("spec.backoff.maxSeconds", CodeInvalid, "%d is not between 1 and 86400", b.MaxSeconds)
		} else if b.MaxSeconds > 0 && b.MaxSeconds < b.BaseSeconds {
			fe.add("spec.backoff.maxSeconds", CodeInvalid, "%d is below baseSeconds %d", b.MaxSeconds, b.BaseSeconds)
		}
	}
	if f := s.FailurePolicy; f != nil {
		switch f.Policy {
		case "", GangFail, GangRestart:
		default:
			fe.add("spec.failurePolicy.policy", CodeUnsupported, "%q: one of FailGang, RestartGang", f.Policy)
		}
		if f.MaxRestarts != nil && (*f.MaxRestarts < 0 || *f.MaxRestarts > 100) {
			fe.add("spec.failurePolicy.maxRestarts", CodeInvalid, "%d is not between 0 and 100", *f.MaxRestarts)
		}
	}
	for _, c := range s.Template.Containers {
		for _, e := range c.Env {
			if trainingEnv[e.Name] {
				fe.add("spec.template.containers", CodeInvalid, "container %q sets %s, which the platform sets for every worker", c.Name, e.Name)
			}
		}
	}
	return fe
}

// trainingEnv are the variables the platform sets in every worker.
var trainingEnv = map[string]bool{
	"RANK": true, "WORLD_SIZE": true, "MASTER_ADDR": true, "MASTER_PORT": true,
	"PET_NNODES": true, "PET_NODE_RANK": true, "PET_MASTER_ADDR": true, "PET_MASTER_PORT": true,
	"TF_CONFIG": true,
}

// Pods implements Spec: the whole gang runs at once, so quota demand is
// workers x the pod's requests.
func (s *TrainingJobSpec) Pods() int32 { return s.Workers }

// BackoffFor is the requeue delay after the n-th requeue (n >= 1):
// BaseSeconds x 2^(n-1), at most MaxSeconds.
func (s *TrainingJobSpec) BackoffFor(n int32) time.Duration {
	base, most := int64(DefaultBackoffBaseSeconds), int64(DefaultBackoffMaxSeconds)
	if b := s.Backoff; b != nil {
		if b.BaseSeconds > 0 {
			base = int64(b.BaseSeconds)
		}
		if b.MaxSeconds > 0 {
			most = int64(b.MaxSeconds)
		}
	}
	d := base
	for i := int32(1); i < n && d < most; i++ {
		d *= 2
	}
	return time.Duration(min(d, max(most, base))) * time.Second
}

// ReadyTimeout is ReadyTimeoutSeconds as a duration (the default when unset).
func (s *TrainingJobSpec) ReadyTimeout() time.Duration {
	if s.ReadyTimeoutSeconds <= 0 {
		return DefaultReadyTimeoutSeconds * time.Second
	}
	return time.Duration(s.ReadyTimeoutSeconds) * time.Second
}

// Policy returns the failure policy and its restart bound, defaults applied.
func (s *TrainingJobSpec) Policy() (policy string, maxRestarts int32) {
	policy, maxRestarts = GangFail, DefaultMaxRestarts
	if f := s.FailurePolicy; f != nil {
		if f.Policy != "" {
			policy = f.Policy
		}
		if f.MaxRestarts != nil {
			maxRestarts = *f.MaxRestarts
		}
	}
	return policy, maxRestarts
}

// GangState is the scheduler's record of a TrainingJob's gang, kept in its
// placement (PlacementDecision.Gang): the scheduler is the only writer.
type GangState struct {
	// Attempt counts the gang's placements (1: the first); each is a new
	// Job (AnnoGangAttempt).
	Attempt int32 `json:"attempt"`
	// PlacedAt is when the current attempt was placed: its ready timeout
	// runs from there.
	PlacedAt time.Time `json:"placedAt,omitzero"`
	// ReadyAt is when every worker of the current attempt was first seen
	// Running; the ready timeout no longer applies after it.
	ReadyAt *time.Time `json:"readyAt,omitempty"`
	// Requeues counts the gang's timeouts.
	Requeues int32 `json:"requeues,omitempty"`
	// Restarts counts the gang's recreations after a failed worker.
	Restarts int32 `json:"restarts,omitempty"`
	// NextAttempt, while the gang is requeued (no shards), is when it may
	// be placed again.
	NextAttempt *time.Time `json:"nextAttempt,omitempty"`
	// QuotaReleased says the gang's quota reservation was released when it
	// was taken down and is not reserved again yet.
	QuotaReleased bool `json:"quotaReleased,omitempty"`
	// LastRequeue says why the gang was last taken down.
	LastRequeue string `json:"lastRequeue,omitempty"`
	// RestartedAfter is the placement revision the last restart replaced:
	// the idempotency number of its gang-restarted event, which grows
	// across restarts, generations and a workload deleted and created
	// again (the scheduler's announceRestart).
	RestartedAfter uint64 `json:"restartedAfter,omitempty"`
}

// TrainingStatus is a TrainingJob's gang as the aggregator folds it.
type TrainingStatus struct {
	// Cluster runs the gang (empty while requeued or pending).
	Cluster string `json:"cluster,omitempty"`
	// Workers is the gang's size.
	Workers int32 `json:"workers"`
	// Attempt, Requeues, Restarts, NextAttempt, PlacedAt and ReadyAt are
	// the scheduler's (GangState).
	Attempt     int32      `json:"attempt,omitempty"`
	Requeues    int32      `json:"requeues,omitempty"`
	Restarts    int32      `json:"restarts,omitempty"`
	NextAttempt *time.Time `json:"nextAttempt,omitempty"`
	PlacedAt    *time.Time `json:"placedAt,omitempty"`
	ReadyAt     *time.Time `json:"readyAt,omitempty"`
	// LastRequeue says why the gang was last taken down.
	LastRequeue string `json:"lastRequeue,omitempty"`
	// Ranks are the workers of the current attempt, by rank.
	Ranks []TrainingRank `json:"ranks,omitempty"`
}

// TrainingRank is one worker of a TrainingJob.
type TrainingRank struct {
	Rank int32 `json:"rank"`
	// Pod is its pod's name; empty while it has none.
	Pod string `json:"pod,omitempty"`
	// Phase is its pod's phase (Pending, Running, Succeeded, Failed).
	Phase string `json:"phase"`
	// Node runs the pod.
	Node string `json:"node,omitempty"`
	// Restarts sums its containers' restart counts.
	Restarts int32 `json:"restarts,omitempty"`
}
