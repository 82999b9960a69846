package api

import "fmt"

// Kind names.
const (
	KindApp    = "App"
	KindJobSet = "JobSet"
	KindPod    = "Pod"
)

// registry is every kind Atoll knows, in one literal table: its spec type
// and what it can do. A kind's spec lives in its own file (kinds.go for
// App, JobSet and Pod; config.go, cronjob.go, daemon.go, scaler.go, training.go).
// Adding a kind adds its file and one entry here (CONTRIBUTING.md lists
// the rest).
func registry() map[string]Kind {
	return map[string]Kind{
		KindApp: {Name: KindApp, New: func() Spec { return &AppSpec{} }, Paused: "its Deployments are held at zero replicas", Claims: true,
			Ops: []string{OpPause, OpResume, OpStop, OpStart, OpRestart, OpRestartContainer, OpScale, OpRolloutPause, OpRolloutResume, OpRolloutUndo}},
		KindJobSet: {Name: KindJobSet, New: func() Spec { return &JobSetSpec{} }, Paused: "its Jobs are suspended", Claims: true,
			Ops: []string{OpPause, OpResume, OpStop, OpStart, OpRestart, OpRestartContainer, OpScale}},
		// A Pod has no replicas to hold at zero and no Job to suspend, and
		// always runs one pod: no pause, no scale.
		KindPod: {Name: KindPod, New: func() Spec { return &PodSpec{} },
			Ops: []string{OpStop, OpStart, OpRestart, OpRestartContainer}},
		// Pausing a CronJob suspends it.
		KindCronJob: {Name: KindCronJob, New: func() Spec { return &CronJobSpec{} }, Paused: "its CronJob is suspended",
			Ops: []string{OpPause, OpResume, OpStop, OpStart, OpRestart, OpRestartContainer}},
		// A DaemonSet cannot be suspended, and its pods follow the nodes.
		KindDaemon: {Name: KindDaemon, New: func() Spec { return &DaemonSpec{} }, AdminOnly: true, EveryCluster: true,
			Ops: []string{OpStop, OpStart, OpRestart, OpRestartContainer}},
		// Pausing a TrainingJob suspends its gang's Job.
		KindTrainingJob: {Name: KindTrainingJob, New: func() Spec { return &TrainingJobSpec{} }, Paused: "its gang's Job is suspended",
			Ops: []string{OpPause, OpResume, OpStop, OpStart, OpRestart, OpRestartContainer}},
		// A Scaler runs nothing itself; pausing it is how to scale its App
		// by hand (the autoscaler leaves a paused Scaler's App alone).
		KindScaler: {Name: KindScaler, New: func() Spec { return &ScalerSpec{} }, Unplaced: true, NoPods: true, Paused: "the autoscaler leaves its App alone",
			Ops: []string{OpPause, OpResume}},
		// A Config or a Secret is data a workload names (config.go): the
		// propagator writes it where a workload using it runs; it has no
		// operations.
		KindConfig: {Name: KindConfig, New: func() Spec { return &ConfigSpec{} }, Unplaced: true, NoPods: true},
		KindSecret: {Name: KindSecret, New: func() Spec { return &SecretSpec{} }, Unplaced: true, NoPods: true},
	}
}

// Common holds what every kind's spec has.
type Common struct {
	// Tier is how resources are guaranteed (default OnDemand).
	Tier Tier `json:"tier,omitempty"`
	// Placement constrains where the workload may run.
	Placement *Placement `json:"placement,omitempty"`
	// Priority orders work within its tier (higher first, MinPriority to
	// MaxPriority); among Preemptible work the lower is preempted first.
	Priority int32 `json:"priority,omitempty"`
	// Template is what each pod runs.
	Template PodTemplate `json:"template"`
}

// PodTemplate implements Spec.
func (c *Common) PodTemplate() *PodTemplate { return &c.Template }

// Scheduling implements Spec.
func (c *Common) Scheduling() (Tier, *Placement) {
	if c.Placement == nil {
		return c.Tier, &Placement{}
	}
	return c.Tier, c.Placement
}

func (c *Common) defaults() {
	if c.Tier == "" {
		c.Tier = TierOnDemand
	}
	// GPUs asked through placement are requested by the first container.
	if h := c.Placement; h != nil && h.Hardware != nil && h.Hardware.GPUs > 0 && len(c.Template.Containers) > 0 {
		if c.Template.PodRequests().GPUs == 0 {
			c.Template.Containers[0].Resources.Requests.GPU = h.Hardware.GPUs
		}
	}
	c.Template.defaults()
}

func (c *Common) validate(fe *FieldErrors) {
	validateTier("spec.tier", c.Tier, fe)
	if c.Priority < MinPriority || c.Priority > MaxPriority {
		fe.add("spec.priority", CodeInvalid, "%d: between %d and %d", c.Priority, MinPriority, MaxPriority)
	}
	c.Placement.validate("spec.placement", fe)
	c.Template.validate("spec.template", fe)
}

// Upper bounds on pod counts.
const (
	MaxReplicas    = 10000
	MaxCompletions = 100000
)

// AppSpec is a long-running service: a Deployment per shard.
type AppSpec struct {
	Common
	// Replicas is the number of pods across all zones.
	Replicas *int32 `json:"replicas,omitempty"`
	// Paused pauses the Deployments' rollouts (Kubernetes' own pause); the
	// pause operation is a different thing: it holds the App at zero replicas.
	Paused bool `json:"paused,omitempty"`
	// Availability is the disruption budget of each shard (availability.go);
	// nil means DefaultMaxUnavailable.
	Availability *Availability `json:"availability,omitempty"`
	// Rollout is how a template change rolls out across zones
	// (rollout.go); nil means the defaults.
	Rollout *RolloutStrategy `json:"rollout,omitempty"`
	// Expose, when set, routes a host and path from outside the region to
	// one of the App's named ports (expose.go).
	Expose *Expose `json:"expose,omitempty"`
	// OnZoneLoss is what happens to the replicas of a lost zone when the
	// template has claim templates (claims.go): Wait (default) or Recreate.
	OnZoneLoss ZoneLossPolicy `json:"onZoneLoss,omitempty"`
	// UpdateStrategy is how a zone's pods take a template change:
	// UpdateRollingUpdate (the default: new pods replace them) or
	// UpdateInPlaceIfPossible (inplace.go).
	UpdateStrategy string `json:"updateStrategy,omitempty"`
}

// Default implements Spec.
func (s *AppSpec) Default() {
	s.defaults()
	s.Expose.defaults()
	if s.Replicas == nil {
		one := int32(1)
		s.Replicas = &one
	}
}

// Validate implements Spec.
func (s *AppSpec) Validate() FieldErrors {
	var fe FieldErrors
	s.validate(&fe)
	if s.Replicas != nil && (*s.Replicas < 0 || *s.Replicas > MaxReplicas) {
		fe.add("spec.replicas", CodeInvalid, "%d is not between 0 and %d", *s.Replicas, MaxReplicas)
	}
	s.Availability.validate("spec.availability", &fe)
	s.Rollout.validate("spec.rollout", &fe)
	s.Expose.validate("spec.expose", &s.Template, &fe)
	s.OnZoneLoss.validate("spec.onZoneLoss", &fe)
	if s.OnZoneLoss != "" && len(s.Template.VolumeClaimTemplates) == 0 {
		fe.add("spec.onZoneLoss", CodeInvalid, "only an App with claim templates has a zone loss policy")
	}
	validateUpdateStrategy("spec.updateStrategy", s.UpdateStrategy, &fe)
	return fe
}

// Pods implements Spec.
func (s *AppSpec) Pods() int32 {
	if s.Replicas == nil {
		return 1
	}
	return *s.Replicas
}

// JobSetSpec is run-to-finish parallel work: Indexed Jobs whose index
// range is split across clusters.
type JobSetSpec struct {
	Common
	// Parallelism is how many pods run at once across all clusters.
	Parallelism int32 `json:"parallelism,omitempty"`
	// Completions is the number of indexes, 0..Completions-1.
	Completions int32 `json:"completions,omitempty"`
	// BackoffLimit is the retries per shard before it fails (default 6).
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`
}

// Default implements Spec.
func (s *JobSetSpec) Default() {
	s.defaults()
	if s.Completions == 0 {
		s.Completions = 1
	}
	if s.Parallelism == 0 {
		s.Parallelism = min(s.Completions, 1)
	}
	if s.BackoffLimit == nil {
		six := int32(6)
		s.BackoffLimit = &six
	}
}

// Validate implements Spec.
func (s *JobSetSpec) Validate() FieldErrors {
	var fe FieldErrors
	s.validate(&fe)
	if s.Completions < 0 || s.Completions > MaxCompletions {
		fe.add("spec.completions", CodeInvalid, "%d is not between 1 and %d", s.Completions, MaxCompletions)
	}
	if s.Parallelism < 0 || s.Parallelism > MaxReplicas {
		fe.add("spec.parallelism", CodeInvalid, "%d is not between 1 and %d", s.Parallelism, MaxReplicas)
	}
	if s.Parallelism > 0 && s.Completions > 0 && s.Parallelism > s.Completions {
		fe.add("spec.parallelism", CodeInvalid, "%d exceeds completions %d", s.Parallelism, s.Completions)
	}
	if s.BackoffLimit != nil && *s.BackoffLimit < 0 {
		fe.add("spec.backoffLimit", CodeInvalid, "%d is negative", *s.BackoffLimit)
	}
	return fe
}

// Pods implements Spec.
func (s *JobSetSpec) Pods() int32 { return s.Parallelism }

// PodSpec is one general-purpose pod in one cluster (pod.go).
type PodSpec struct {
	Common
	// Volume is an optional persistent volume (see pod.go for what a
	// failover does to its data).
	Volume *PodVolume `json:"volume,omitempty"`
}

// Default implements Spec.
func (s *PodSpec) Default() { s.defaults() }

// Validate implements Spec.
func (s *PodSpec) Validate() FieldErrors {
	var fe FieldErrors
	s.validate(&fe)
	s.Volume.validate("spec.volume", &s.Template, &fe)
	return fe
}

// Pods implements Spec.
func (s *PodSpec) Pods() int32 { return 1 }

// Validate checks the envelope and the spec within DefaultLimits,
// returning every problem.
func Validate(w *Workload) FieldErrors { return ValidateWith(w, DefaultLimits()) }

// ValidateWith checks the envelope and the spec, and the spec's pod
// template within the platform's limits l, returning every problem.
func ValidateWith(w *Workload, l Limits) FieldErrors {
	var fe FieldErrors
	if w.APIVersion != APIVersion {
		fe.add("apiVersion", CodeUnsupported, "%q: want %q", w.APIVersion, APIVersion)
	}
	k, ok := kinds[w.Kind]
	if !ok {
		fe.add("kind", CodeUnsupported, "unknown kind %q", w.Kind)
	}
	m := w.Metadata
	if code, reason, ok := CheckProject(m.Project); !ok {
		fe.add("metadata.project", code, "%s", reason)
	}
	if m.Name == "" {
		fe.add("metadata.name", CodeRequired, "name is required")
	} else if !IsDNSLabel(m.Name) {
		fe.add("metadata.name", CodeInvalid, "%q is not a DNS label (lower-case letters, digits and '-', at most 63)", m.Name)
	}
	validateLabels("metadata.labels", m.Labels, &fe)
	if w.Spec == nil {
		fe.add("spec", CodeRequired, "spec is required")
	} else {
		fe = append(fe, w.Spec.Validate()...)
		l.check(w.Spec.PodTemplate(), "spec.template", &fe)
		if t := w.Spec.PodTemplate(); ok && !k.Claims && t != nil && len(t.VolumeClaimTemplates) > 0 {
			fe.add("spec.template.volumeClaimTemplates", CodeUnsupported, "a %s has no claim templates", w.Kind)
		}
	}
	return fe
}

// String names a workload for logs.
func (w *Workload) String() string {
	return fmt.Sprintf("%s/%s/%s", w.Metadata.Project, w.Kind, w.Metadata.Name)
}
