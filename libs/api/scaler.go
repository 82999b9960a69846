package api

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// KindScaler is the autoscaling policy of one App (PinScaler). A Scaler
// places nothing: the autoscaler changes its App's replicas through
// admission's scale operation.
const KindScaler = "Scaler"

// Metric types of ScalerMetric.Type.
const (
	// MetricCPU is the CPU utilization of the pods' requests, in percent.
	MetricCPU = "cpu"
	// MetricMemory is the memory utilization of the pods' requests, in percent.
	MetricMemory = "memory"
	// MetricCustom is an application metric pushed through the gateway.
	MetricCustom = "custom"
)

// Failure actions of FailurePolicy.Action.
const (
	// FailureHold keeps the current replicas while the metric is missing
	// (unless another healthy metric or a schedule asks for more).
	FailureHold = "hold"
	// FailureFallback proposes FailurePolicy.Replicas while the metric is
	// missing, never lower than what another healthy metric or a schedule
	// asks.
	FailureFallback = "fallback"
)

// Rate policy types of RatePolicy.Type.
const (
	RatePods    = "pods"
	RatePercent = "percent"
)

// Defaults of a Scaler's behavior, the HPA's where it has one.
const (
	DefaultScalerTolerance        = 0.1
	DefaultScaleDownWindowSeconds = 300
	DefaultRatePeriodSeconds      = 15
	DefaultMetricStaleSeconds     = 60
)

// ScalerSpec is a Scaler: how one App of the project scales.
type ScalerSpec struct {
	// Target is the name of the App scaled, in the Scaler's project.
	Target string `json:"target"`
	// MinReplicas is the lowest size (default 1; 0 allowed).
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// MaxReplicas is the highest size.
	MaxReplicas int32 `json:"maxReplicas"`
	// Metrics are what the replicas follow; the highest proposal wins.
	Metrics []ScalerMetric `json:"metrics,omitempty"`
	// Schedules are floors of replicas for windows of time.
	Schedules []ScalerSchedule `json:"schedules,omitempty"`
	// Behavior tunes tolerance, stabilization, rates and cooldown.
	Behavior ScalerBehavior `json:"behavior,omitzero"`

	tmpl PodTemplate // always empty: a Scaler runs no pods
}

// ScalerMetric is one metric the App's replicas follow.
type ScalerMetric struct {
	// Type is cpu, memory or custom.
	Type string `json:"type"`
	// Name names a custom metric (a DNS label: it is a subject token).
	Name string `json:"name,omitempty"`
	// TargetUtilization is cpu and memory's target, percent of requests.
	TargetUtilization int32 `json:"targetUtilization,omitempty"`
	// TargetPerPod is a custom metric's target value per pod (the metric
	// is a total over the App, divided by its ready pods).
	TargetPerPod float64 `json:"targetPerPod,omitempty"`
	// TargetTotal is a custom metric's target value for the whole App.
	TargetTotal float64 `json:"targetTotal,omitempty"`
	// OnFailure says what the metric proposes when it has no fresh sample
	// (default hold).
	OnFailure *FailurePolicy `json:"onFailure,omitempty"`
}

// Key names the metric in samples and subjects: cpu, memory or the
// custom metric's name.
func (m *ScalerMetric) Key() string {
	if m.Type == MetricCustom {
		return m.Name
	}
	return m.Type
}

// FailurePolicy is what a metric proposes while it has no fresh sample.
type FailurePolicy struct {
	// Action is hold or fallback.
	Action string `json:"action"`
	// Replicas is a fallback's proposal.
	Replicas int32 `json:"replicas,omitempty"`
	// AfterSeconds is how old the last sample may be before the metric is
	// failed (default 60).
	AfterSeconds int32 `json:"afterSeconds,omitempty"`
}

// ScalerSchedule is a floor of replicas from each time Cron fires, for
// DurationSeconds.
type ScalerSchedule struct {
	// Name names the schedule in decisions.
	Name string `json:"name,omitempty"`
	// Cron is a five-field cron expression (minute hour day month weekday).
	Cron string `json:"cron"`
	// TimeZone is an IANA zone the expression is read in (default UTC).
	TimeZone string `json:"timeZone,omitempty"`
	// Replicas is the floor while the window is open.
	Replicas int32 `json:"replicas"`
	// DurationSeconds is how long the window stays open after each firing.
	DurationSeconds int32 `json:"durationSeconds"`
}

// ScalerBehavior tunes how fast the replicas follow the proposals.
type ScalerBehavior struct {
	// Tolerance is the ratio band around 1 inside which nothing changes
	// (default 0.1).
	Tolerance *float64 `json:"tolerance,omitempty"`
	// ScaleUp and ScaleDown are each direction's rules.
	ScaleUp   *ScalingRules `json:"scaleUp,omitempty"`
	ScaleDown *ScalingRules `json:"scaleDown,omitempty"`
	// CooldownSeconds is how long after a change no other change is made
	// (default 0: stabilization alone).
	CooldownSeconds int32 `json:"cooldownSeconds,omitempty"`
}

// ScalingRules are one direction's stabilization and rate limits.
type ScalingRules struct {
	// StabilizationWindowSeconds: scale-up takes the lowest proposal of the
	// window, scale-down the highest (defaults 0 up, 300 down).
	StabilizationWindowSeconds *int32 `json:"stabilizationWindowSeconds,omitempty"`
	// Policies limit the change per period; SelectPolicy picks among them.
	Policies []RatePolicy `json:"policies,omitempty"`
	// SelectPolicy is max (default), min or disabled (no change this way).
	SelectPolicy string `json:"selectPolicy,omitempty"`
}

// RatePolicy allows a change of Value pods (or percent) per PeriodSeconds.
type RatePolicy struct {
	Type          string `json:"type"`
	Value         int32  `json:"value"`
	PeriodSeconds int32  `json:"periodSeconds"`
}

// Default implements Spec.
func (s *ScalerSpec) Default() {
	if s.MinReplicas == nil {
		one := int32(1)
		s.MinReplicas = &one
	}
	for i := range s.Metrics {
		m := &s.Metrics[i]
		m.Type = strings.ToLower(m.Type)
		if m.OnFailure == nil {
			m.OnFailure = &FailurePolicy{Action: FailureHold}
		}
		if m.OnFailure.AfterSeconds == 0 {
			m.OnFailure.AfterSeconds = DefaultMetricStaleSeconds
		}
	}
	for i := range s.Schedules {
		if s.Schedules[i].TimeZone == "" {
			s.Schedules[i].TimeZone = "UTC"
		}
	}
	b := &s.Behavior
	if b.Tolerance == nil {
		t := DefaultScalerTolerance
		b.Tolerance = &t
	}
	if b.ScaleUp == nil {
		b.ScaleUp = &ScalingRules{}
	}
	if b.ScaleUp.StabilizationWindowSeconds == nil {
		zero := int32(0)
		b.ScaleUp.StabilizationWindowSeconds = &zero
	}
	if len(b.ScaleUp.Policies) == 0 && b.ScaleUp.SelectPolicy != "disabled" {
		b.ScaleUp.Policies = []RatePolicy{{RatePods, 4, DefaultRatePeriodSeconds}, {RatePercent, 100, DefaultRatePeriodSeconds}}
	}
	if b.ScaleDown == nil {
		b.ScaleDown = &ScalingRules{}
	}
	if b.ScaleDown.StabilizationWindowSeconds == nil {
		w := int32(DefaultScaleDownWindowSeconds)
		b.ScaleDown.StabilizationWindowSeconds = &w
	}
	if len(b.ScaleDown.Policies) == 0 && b.ScaleDown.SelectPolicy != "disabled" {
		b.ScaleDown.Policies = []RatePolicy{{RatePercent, 100, DefaultRatePeriodSeconds}}
	}
	for _, r := range []*ScalingRules{b.ScaleUp, b.ScaleDown} {
		if r.SelectPolicy == "" {
			r.SelectPolicy = "max"
		}
	}
}

// Validate implements Spec.
func (s *ScalerSpec) Validate() FieldErrors {
	var fe FieldErrors
	if s.Target == "" {
		fe.add("spec.target", CodeRequired, "the name of the App to scale is required")
	} else if !IsDNSLabel(s.Target) {
		fe.add("spec.target", CodeInvalid, "%q is not a DNS label", s.Target)
	}
	lo := int32(1)
	if s.MinReplicas != nil {
		lo = *s.MinReplicas
	}
	if lo < 0 || lo > MaxReplicas {
		fe.add("spec.minReplicas", CodeInvalid, "%d is not between 0 and %d", lo, MaxReplicas)
	}
	switch {
	case s.MaxReplicas < 1 || s.MaxReplicas > MaxReplicas:
		fe.add("spec.maxReplicas", CodeInvalid, "%d is not between 1 and %d", s.MaxReplicas, MaxReplicas)
	case s.MaxReplicas < lo:
		fe.add("spec.maxReplicas", CodeInvalid, "%d is below minReplicas %d", s.MaxReplicas, lo)
	}
	if len(s.Metrics) == 0 && len(s.Schedules) == 0 {
		fe.add("spec.metrics", CodeRequired, "a Scaler needs at least one metric or schedule")
	}
	seen := map[string]bool{}
	for i := range s.Metrics {
		s.Metrics[i].validate(fmt.Sprintf("spec.metrics[%d]", i), seen, &fe)
	}
	for i := range s.Schedules {
		s.Schedules[i].validate(fmt.Sprintf("spec.schedules[%d]", i), &fe)
	}
	s.Behavior.validate("spec.behavior", &fe)
	return fe
}

func (m *ScalerMetric) validate(p string, seen map[string]bool, fe *FieldErrors) {
	switch strings.ToLower(m.Type) {
	case MetricCPU, MetricMemory:
		if m.TargetUtilization < 1 || m.TargetUtilization > 1000 {
			fe.add(p+".targetUtilization", CodeInvalid, "%d is not a percentage between 1 and 1000", m.TargetUtilization)
		}
		if m.Name != "" || m.TargetPerPod != 0 || m.TargetTotal != 0 {
			fe.add(p+".type", CodeInvalid, "name, targetPerPod and targetTotal are for custom metrics")
		}
	case MetricCustom:
		if !IsDNSLabel(m.Name) || m.Name == MetricCPU || m.Name == MetricMemory {
			fe.add(p+".name", CodeInvalid, "%q: a custom metric needs a DNS-label name other than cpu and memory", m.Name)
		}
		if (m.TargetPerPod > 0) == (m.TargetTotal > 0) || m.TargetPerPod < 0 || m.TargetTotal < 0 ||
			math.IsInf(m.TargetPerPod+m.TargetTotal, 0) || math.IsNaN(m.TargetPerPod+m.TargetTotal) {
			fe.add(p+".targetPerPod", CodeInvalid, "a custom metric needs exactly one positive target: targetPerPod or targetTotal")
		}
		if m.TargetUtilization != 0 {
			fe.add(p+".targetUtilization", CodeInvalid, "targetUtilization is for cpu and memory")
		}
	default:
		fe.add(p+".type", CodeUnsupported, "%q: one of cpu, memory, custom", m.Type)
		return
	}
	k := strings.ToLower(m.Type)
	if k == MetricCustom {
		k = m.Name
	}
	if seen[k] {
		fe.add(p, CodeDuplicate, "metric %q is listed twice", k)
	}
	seen[k] = true
	if f := m.OnFailure; f != nil {
		switch f.Action {
		case FailureHold, "":
			if f.Replicas != 0 {
				fe.add(p+".onFailure.replicas", CodeInvalid, "replicas is only for fallback")
			}
		case FailureFallback:
			if f.Replicas < 0 || f.Replicas > MaxReplicas {
				fe.add(p+".onFailure.replicas", CodeInvalid, "%d is not between 0 and %d", f.Replicas, MaxReplicas)
			}
		default:
			fe.add(p+".onFailure.action", CodeUnsupported, "%q: one of hold, fallback", f.Action)
		}
		if f.AfterSeconds < 0 || f.AfterSeconds > 86400 {
			fe.add(p+".onFailure.afterSeconds", CodeInvalid, "%d is not between 0 and 86400", f.AfterSeconds)
		}
	}
}

func (c *ScalerSchedule) validate(p string, fe *FieldErrors) {
	if err := checkCron(c.Cron); err != nil {
		fe.add(p+".cron", CodeInvalid, "%q: %v", c.Cron, err)
	}
	if c.TimeZone != "" {
		if _, err := time.LoadLocation(c.TimeZone); err != nil {
			fe.add(p+".timeZone", CodeInvalid, "%q is not an IANA time zone", c.TimeZone)
		}
	}
	if c.Replicas < 0 || c.Replicas > MaxReplicas {
		fe.add(p+".replicas", CodeInvalid, "%d is not between 0 and %d", c.Replicas, MaxReplicas)
	}
	if c.DurationSeconds < 1 {
		fe.add(p+".durationSeconds", CodeInvalid, "%d: a schedule's window lasts at least one second", c.DurationSeconds)
	}
}

// checkCron checks the shape of a five-field cron expression; the
// autoscaler parses it fully (a field out of range is refused there too).
func checkCron(expr string) error {
	f := strings.Fields(expr)
	if len(f) != 5 {
		return fmt.Errorf("want five fields (minute hour day-of-month month day-of-week), got %d", len(f))
	}
	for _, x := range f {
		for _, r := range x {
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || strings.ContainsRune("*,/-?", r)) {
				return fmt.Errorf("unexpected %q in field %q", r, x)
			}
		}
	}
	return nil
}

func (b *ScalerBehavior) validate(p string, fe *FieldErrors) {
	if b.Tolerance != nil && (*b.Tolerance < 0 || *b.Tolerance >= 1 || math.IsNaN(*b.Tolerance)) {
		fe.add(p+".tolerance", CodeInvalid, "%v is not in [0, 1)", *b.Tolerance)
	}
	if b.CooldownSeconds < 0 || b.CooldownSeconds > 86400 {
		fe.add(p+".cooldownSeconds", CodeInvalid, "%d is not between 0 and 86400", b.CooldownSeconds)
	}
	for _, r := range []struct {
		path  string
		rules *ScalingRules
	}{{p + ".scaleUp", b.ScaleUp}, {p + ".scaleDown", b.ScaleDown}} {
		if r.rules == nil {
			continue
		}
		if w := r.rules.StabilizationWindowSeconds; w != nil && (*w < 0 || *w > 3600) {
			fe.add(r.path+".stabilizationWindowSeconds", CodeInvalid, "%d is not between 0 and 3600", *w)
		}
		switch r.rules.SelectPolicy {
		case "", "max", "min", "disabled":
		default:
			fe.add(r.path+".selectPolicy", CodeUnsupported, "%q: one of max, min, disabled", r.rules.SelectPolicy)
		}
		for i, rp := range r.rules.Policies {
			pp := fmt.Sprintf("%s.policies[%d]", r.path, i)
			if rp.Type != RatePods && rp.Type != RatePercent {
				fe.add(pp+".type", CodeUnsupported, "%q: one of pods, percent", rp.Type)
			}
			if rp.Value < 1 {
				fe.add(pp+".value", CodeInvalid, "%d: a rate allows at least 1", rp.Value)
			}
			if rp.PeriodSeconds < 1 || rp.PeriodSeconds > 1800 {
				fe.add(pp+".periodSeconds", CodeInvalid, "%d is not between 1 and 1800", rp.PeriodSeconds)
			}
		}
	}
}

// PodTemplate implements Spec: a Scaler runs no pods, so its template is
// always empty (and not part of the document).
func (s *ScalerSpec) PodTemplate() *PodTemplate { return &s.tmpl }

// Scheduling implements Spec: a Scaler is placed nowhere.
func (s *ScalerSpec) Scheduling() (Tier, *Placement) { return TierOnDemand, &Placement{} }

// Pods implements Spec: a Scaler runs no pods and reserves no quota.
func (s *ScalerSpec) Pods() int32 { return 0 }

// Min is MinReplicas with its default.
func (s *ScalerSpec) Min() int32 {
	if s.MinReplicas == nil {
		return 1
	}
	return *s.MinReplicas
}

// MetricSample is one measurement of one metric of one App, the body of a
// message on bus.MetricsSubject(project, app, metric). The aggregator
// publishes cpu and memory (utilization of the requests of the pods it
// measured); the gateway publishes custom metrics users push.
type MetricSample struct {
	// Value is a utilization in percent of requests (cpu, memory), or a
	// custom metric's total over the App.
	Value float64 `json:"value"`
	// Pods is how many pods were measured (cpu, memory); 0 for custom
	// metrics.
	Pods int32 `json:"pods,omitempty"`
	// At is when the value was measured.
	At time.Time `json:"at"`
	// Cluster, when set, says the sample is the part of the App in that
	// member cluster (the aggregator publishes one per cluster); the
	// autoscaler combines the latest part of each cluster: utilization =
	// 100 x sum(Usage) / sum(Requests).
	Cluster string `json:"cluster,omitempty"`
	// Usage and Requests are the part's totals (cpu: millicores, memory:
	// bytes).
	Usage    float64 `json:"usage,omitempty"`
	Requests float64 `json:"requests,omitempty"`
}

// Events of a Scaler (libs/events): the autoscaler changed its App's
// replicas, or admission refused the change (the message carries why).
const (
	EventScaleRefused = "scale-refused"
)
