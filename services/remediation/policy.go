package remediation

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/disruption"
)

// Keys of the remediation bucket (bus.BucketRemediation).
const (
	// KeyPolicy holds the region's Policy as JSON; absent means
	// DefaultPolicy.
	KeyPolicy = "policy"
	// KeyPauseRegion, when present, pauses new actions in every cluster.
	KeyPauseRegion = "pause.region"
)

// PauseKey is the key that pauses new actions in one cluster.
func PauseKey(cluster string) string { return "pause." + cluster }

// NodeKey is the key of what the service does to one node.
func NodeKey(cluster, uid string) string { return "n." + cluster + "." + uid }

// Duration is a time.Duration written as a Go duration string ("5m").
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"5m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Condition is a node condition read as unhealthy: Type in one of
// Statuses for at least For, timed from when the service first saw it.
type Condition struct {
	Type     corev1.NodeConditionType `json:"type"`
	Statuses []corev1.ConditionStatus `json:"statuses"`
	For      Duration                 `json:"for"`
}

// DrainPolicy is what happens when a drain passes its deadline.
type DrainPolicy string

// Drain policies.
const (
	// DrainStop leaves the node cordoned and marks it as needing a human;
	// the blocking budget is named in its status.
	DrainStop DrainPolicy = "stop"
	// DrainForce deletes the pods left (bypassing budgets) and goes on.
	DrainForce DrainPolicy = "force"
)

// Steps is the escalation of one pool: which signals count, and each
// step's timing.
type Steps struct {
	// Conditions read as unhealthy (default Ready False or Unknown for 5m).
	Conditions []Condition `json:"conditions,omitempty"`
	// DrainAfter is how long a cordoned node is given to recover before
	// its drain starts (default 0).
	DrainAfter Duration `json:"drainAfter,omitempty"`
	// DrainRetry is the first wait between drain passes while a budget
	// refuses evictions; it doubles up to DrainRetryMax (defaults 5s, 1m).
	DrainRetry    Duration `json:"drainRetry,omitempty"`
	DrainRetryMax Duration `json:"drainRetryMax,omitempty"`
	// DrainDeadline is how long a drain may take before DrainPolicy
	// applies (default 15m).
	DrainDeadline Duration    `json:"drainDeadline,omitempty"`
	DrainPolicy   DrainPolicy `json:"drainPolicy,omitempty"`
	// PodGracePeriod, when set, overrides evicted pods' grace periods.
	PodGracePeriod *Duration `json:"podGracePeriod,omitempty"`
	// SkipWaitForDelete stops waiting for an evicted pod this long past
	// the end of its grace period: a node whose kubelet is gone never
	// confirms a deletion (default 1m).
	SkipWaitForDelete Duration `json:"skipWaitForDelete,omitempty"`
	// ReplaceTimeout is how long a replacement has to become Ready
	// (default 10m); ReplaceAttempts how many replacements are tried
	// before the node needs a human (default 3).
	ReplaceTimeout  Duration `json:"replaceTimeout,omitempty"`
	ReplaceAttempts int      `json:"replaceAttempts,omitempty"`
}

// Policy is the remediation policy of the region (key KeyPolicy).
type Policy struct {
	Steps
	// Pools override Steps for the nodes of a pool (label atoll.dev/pool),
	// each as a whole (unset fields take the defaults, not the region's).
	Pools map[string]Steps `json:"pools,omitempty"`
	// FlapTransitions health changes within FlapWindow make a node
	// flapping: never acted on while it lasts (defaults 4 in 10m).
	FlapTransitions int      `json:"flapTransitions,omitempty"`
	FlapWindow      Duration `json:"flapWindow,omitempty"`
	// MaxUnhealthy is the storm breaker of each failure domain (a pool, a
	// cluster, a zone): no new action there while more of its nodes than
	// this are unhealthy. A count or a percentage, which rounds DOWN and
	// never below one (disruption.Limit); default "30%".
	MaxUnhealthy disruption.Limit `json:"maxUnhealthy,omitempty"`
	// Cooldown is how long a breaker stays open after its domain is back
	// within MaxUnhealthy (default 2m).
	Cooldown Duration `json:"cooldown,omitempty"`
	// ActionEvery and ActionBurst are the token bucket of new actions per
	// cluster (defaults one per 30s, burst 1).
	ActionEvery Duration `json:"actionEvery,omitempty"`
	ActionBurst int      `json:"actionBurst,omitempty"`
	// Budget bounds the nodes out of service per pool and per cluster,
	// shared with the upgrade service (disruption ledger); default one
	// per pool, 20% of a cluster.
	Budget disruption.Budget `json:"budget,omitzero"`
	// LeaseTTL is the disruption lease's lifetime, renewed while working
	// (default 10m).
	LeaseTTL Duration `json:"leaseTTL,omitempty"`
}

// DefaultPolicy is the policy when none is stored.
func DefaultPolicy() Policy {
	var p Policy
	p.Default()
	return p
}

// Default fills unset fields.
func (p *Policy) Default() {
	p.Steps.Default()
	for name, s := range p.Pools {
		s.Default()
		p.Pools[name] = s
	}
	if p.FlapTransitions <= 0 {
		p.FlapTransitions = 4
	}
	if p.FlapWindow <= 0 {
		p.FlapWindow = Duration(10 * time.Minute)
	}
	if p.MaxUnhealthy == "" {
		p.MaxUnhealthy = "30%"
	}
	if p.Cooldown <= 0 {
		p.Cooldown = Duration(2 * time.Minute)
	}
	if p.ActionEvery <= 0 {
		p.ActionEvery = Duration(30 * time.Second)
	}
	if p.ActionBurst <= 0 {
		p.ActionBurst = 1
	}
	if p.Budget == (disruption.Budget{}) {
		p.Budget = disruption.Budget{Pool: "1", Cluster: "20%"}
	}
	if p.LeaseTTL <= 0 {
		p.LeaseTTL = Duration(10 * time.Minute)
	}
}

// Default fills unset fields.
func (s *Steps) Default() {
	if len(s.Conditions) == 0 {
		s.Conditions = []Condition{{Type: corev1.NodeReady, Statuses: []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionUnknown}, For: Duration(5 * time.Minute)}}
	}
	if s.DrainRetry <= 0 {
		s.DrainRetry = Duration(5 * time.Second)
	}
	if s.DrainRetryMax <= 0 {
		s.DrainRetryMax = Duration(time.Minute)
	}
	if s.DrainDeadline <= 0 {
		s.DrainDeadline = Duration(15 * time.Minute)
	}
	if s.DrainPolicy == "" {
		s.DrainPolicy = DrainStop
	}
	if s.SkipWaitForDelete <= 0 {
		s.SkipWaitForDelete = Duration(time.Minute)
	}
	if s.ReplaceTimeout <= 0 {
		s.ReplaceTimeout = Duration(10 * time.Minute)
	}
	if s.ReplaceAttempts <= 0 {
		s.ReplaceAttempts = 3
	}
}

// Validate reports every problem of a policy.
func (p *Policy) Validate() error {
	var errs []error
	check := func(field string, s Steps) {
		for i, c := range s.Conditions {
			if c.Type == "" || len(c.Statuses) == 0 {
				errs = append(errs, fmt.Errorf("%s.conditions[%d]: type and statuses are required", field, i))
			}
		}
		if s.DrainPolicy != "" && s.DrainPolicy != DrainStop && s.DrainPolicy != DrainForce {
			errs = append(errs, fmt.Errorf("%s.drainPolicy: %q is not stop or force", field, s.DrainPolicy))
		}
	}
	check("policy", p.Steps)
	for name, s := range p.Pools {
		check("policy.pools."+name, s)
	}
	if err := p.MaxUnhealthy.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("policy.maxUnhealthy: %w", err))
	}
	if err := p.Budget.Pool.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("policy.budget.pool: %w", err))
	}
	if err := p.Budget.Cluster.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("policy.budget.cluster: %w", err))
	}
	return errors.Join(errs...)
}

// For returns the steps of a pool.
func (p *Policy) For(pool string) Steps {
	if s, ok := p.Pools[pool]; ok {
		return s
	}
	return p.Steps
}

// Pause is the value of a pause key.
type Pause struct {
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	Since  time.Time `json:"since"`
}
