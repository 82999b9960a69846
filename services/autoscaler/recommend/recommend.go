// Package recommend is the autoscaler's decision: a pure function of a
// Scaler's spec, the latest metric samples, the Scaler's history and the
// time, returning the replicas its App should have and why.
//
// The arithmetic is the HPA's (pkg/controller/podautoscaler) where the HPA
// defines it:
//
//   - Per metric, ratio = current / target. Inside the tolerance
//     (|ratio - 1| <= tolerance) the metric proposes the current replicas;
//     otherwise ceil(ratio x measured pods). A custom metric with a target
//     per pod proposes ceil(total / target); one with a total target
//     proposes ceil(ratio x ready pods).
//   - Pods without a measurement (cpu, memory): on a scale-down they count
//     as using max(100%, target) of their request, on a scale-up as 0; if
//     that flips the direction or lands inside the tolerance, the metric
//     proposes the current replicas.
//   - The highest proposal of all metrics wins.
//   - Stabilization: the recommendations of the up window give their
//     lowest, those of the down window their highest; the replicas move
//     only as far as both allow (no flapping).
//   - Rate policies (pods or percent per period, max/min/disabled), counted
//     from the replicas at the start of each policy's period; then
//     minReplicas and maxReplicas.
//
// Where Atoll differs from the HPA and KEDA:
//
//   - A schedule is a floor, combined by max with the metrics' proposals
//     (it never lowers what load asks for), and applied again after
//     stabilization so an open window holds at once.
//   - Each metric has its own failure policy when its samples are missing
//     or stale: hold proposes the current replicas (so a failed metric
//     never lets the others scale down, as the HPA), fallback proposes a
//     fixed count; both are combined by max, so a fallback never overrides
//     a higher healthy metric or schedule.
//   - A cooldown after a change blocks further changes, except moving into
//     [min, max] and up to an open schedule's floor.
//
// Every evaluation returns a Decision: its inputs, each metric's proposal,
// the floor, the chosen replicas and the reason, which the service stores
// as the Scaler's history and puts in the scaled event.
package recommend

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/robfig/cron/v3"

	"atoll.dev/libs/api"
)

// Sample is the latest measurement of one metric (api.MetricSample).
type Sample = api.MetricSample

// Recommendation is one evaluation's proposal before stabilization.
type Recommendation struct {
	At       time.Time `json:"at"`
	Replicas int32     `json:"replicas"`
}

// Change is one change of replicas the autoscaler made.
type Change struct {
	At       time.Time `json:"at"`
	From, To int32
}

// History is what a Scaler remembers between evaluations.
type History struct {
	// Recommendations are the raw proposals of the longest window.
	Recommendations []Recommendation `json:"recommendations,omitempty"`
	// Changes are the changes of the longest rate period or cooldown.
	Changes []Change `json:"changes,omitempty"`
}

// Input is everything one evaluation depends on.
type Input struct {
	// Spec is the Scaler's spec, defaulted.
	Spec *api.ScalerSpec
	// Current is the App's replicas as stored.
	Current int32
	// Ready is the App's ready pods (the status); 0 means unknown, and
	// Current is used.
	Ready int32
	// Samples are the latest sample of each metric, by ScalerMetric.Key.
	Samples map[string]Sample
	// History is the Scaler's history.
	History History
	// Now is the time of the evaluation.
	Now time.Time
	// Schedules parses the spec's crons, remembering the latest it has
	// parsed; nil parses them each time (the result is the same).
	Schedules *Schedules
}

// Proposal states of a metric.
const (
	StateOK        = "ok"
	StateTolerance = "within-tolerance"
	StateHold      = "failed-hold"
	StateFallback  = "failed-fallback"
)

// Proposal is one metric's proposal (api.ScalerProposal: the gateway
// serves it as recorded).
type Proposal = api.ScalerProposal

// Decision is one evaluation: inputs, proposals and outcome
// (api.ScalerDecision).
type Decision = api.ScalerDecision

// Evaluate decides the replicas of one Scaler's App. It is pure: the same
// input gives the same decision.
func Evaluate(in Input) Decision {
	s := in.Spec
	d := Decision{At: in.Now, Current: in.Current, Ready: in.Ready}
	ready := in.Ready
	if ready <= 0 {
		ready = in.Current
	}
	lo, hi := s.Min(), s.MaxReplicas
	tol := api.DefaultScalerTolerance
	if s.Behavior.Tolerance != nil {
		tol = *s.Behavior.Tolerance
	}

	best, bestWhy := int32(-1), ""
	for i := range s.Metrics {
		p := propose(&s.Metrics[i], in.Samples, in.Current, ready, tol, in.Now)
		d.Proposals = append(d.Proposals, p)
		if p.Replicas > best {
			best, bestWhy = p.Replicas, fmt.Sprintf("metric %s %s", p.Metric, describe(p))
		}
	}
	d.Floor, d.FloorSchedule = in.Schedules.Floor(s.Schedules, in.Now)
	if best < 0 { // schedules only: the floor, or min outside windows
		best, bestWhy = 0, "no metrics"
	}
	raw, why := best, bestWhy
	if d.Floor > raw {
		raw, why = d.Floor, fmt.Sprintf("schedule %s floor %d", d.FloorSchedule, d.Floor)
	}
	switch {
	case raw < lo:
		raw, why = lo, fmt.Sprintf("%s; minReplicas %d", why, lo)
	case raw > hi:
		raw, why = hi, fmt.Sprintf("%s; maxReplicas %d", why, hi)
	}
	d.Raw = raw

	d.Stabilized = stabilize(s, in.History.Recommendations, in.Current, raw, in.Now)
	if d.Stabilized != raw {
		why = fmt.Sprintf("%s; stabilized to %d", why, d.Stabilized)
	}
	target := d.Stabilized
	if d.Floor > target {
		target = min(d.Floor, hi) // an open window holds at once
	}
	d.Desired, d.Limited = limit(s, in.History.Changes, in.Current, target, d.Floor, in.Now)
	switch {
	case d.Limited != "":
		d.Reason = fmt.Sprintf("%s; limited by %s", why, d.Limited)
	default:
		d.Reason = why
	}
	return d
}

// propose is one metric's proposal.
func propose(m *api.ScalerMetric, samples map[string]Sample, current, ready int32, tol float64, now time.Time) Proposal {
	p := Proposal{Metric: m.Key()}
	smp, ok := samples[m.Key()]
	stale := time.Duration(api.DefaultMetricStaleSeconds) * time.Second
	if m.OnFailure != nil && m.OnFailure.AfterSeconds > 0 {
		stale = time.Duration(m.OnFailure.AfterSeconds) * time.Second
	}
	if ok {
		p.Age = now.Sub(smp.At)
	}
	if !ok || p.Age > stale || math.IsNaN(smp.Value) || smp.Value < 0 ||
		(m.Type != api.MetricCustom && smp.Pods <= 0) {
		if m.OnFailure != nil && m.OnFailure.Action == api.FailureFallback {
			p.State, p.Replicas = StateFallback, m.OnFailure.Replicas
			return p
		}
		p.State, p.Replicas = StateHold, current
		return p
	}
	p.Value = smp.Value
	switch m.Type {
	case api.MetricCPU, api.MetricMemory:
		p.Target = float64(m.TargetUtilization)
		p.Ratio, p.Replicas = utilization(smp.Value, p.Target, smp.Pods, ready, current, tol)
	default:
		if m.TargetPerPod > 0 {
			p.Target = m.TargetPerPod
			p.Ratio = smp.Value / (m.TargetPerPod * float64(max(current, 1)))
			p.Replicas = ceil(smp.Value / m.TargetPerPod)
		} else {
			p.Target = m.TargetTotal
			p.Ratio = smp.Value / m.TargetTotal
			p.Replicas = ceil(p.Ratio * float64(ready))
		}
		if math.Abs(p.Ratio-1) <= tol {
			p.Replicas = current
		}
	}
	p.State = StateOK
	if p.Replicas == current && math.Abs(p.Ratio-1) <= tol {
		p.State = StateTolerance
	}
	p.Replicas = min(p.Replicas, api.MaxReplicas)
	return p
}

// utilization is the HPA's resource arithmetic over n measured pods out of
// ready (GetResourceReplicas with the missing-pods rule).
func utilization(value, target float64, n, ready, current int32, tol float64) (float64, int32) {
	ratio := value / target
	missing := max(ready-n, 0)
	if missing == 0 {
		if math.Abs(ratio-1) <= tol {
			return ratio, current
		}
		return ratio, ceil(ratio * float64(n))
	}
	fill := 0.0 // on a scale-up, missing pods use nothing
	if ratio < 1 {
		fill = math.Max(100, target) // on a scale-down, all their request
	}
	all := float64(n + missing)
	newRatio := (value*float64(n) + fill*float64(missing)) / all / target
	if math.Abs(newRatio-1) <= tol || (ratio < 1 && newRatio > 1) || (ratio > 1 && newRatio < 1) {
		return newRatio, current
	}
	return newRatio, ceil(newRatio * all)
}

// ceil rounds x up, ignoring float noise below 1e-9 (the HPA computes in
// milli-units, where 3 x (1/3) is 3, not 3.0000000001 or 2.9999999999).
func ceil(x float64) int32 {
	r := math.Round(x)
	if math.Abs(x-r) < 1e-9 {
		return int32(r)
	}
	return int32(math.Ceil(x))
}

func describe(p Proposal) string {
	switch p.State {
	case StateHold:
		return fmt.Sprintf("has no fresh sample: holds %d", p.Replicas)
	case StateFallback:
		return fmt.Sprintf("has no fresh sample: falls back to %d", p.Replicas)
	case StateTolerance:
		return fmt.Sprintf("%.4g of target %.4g is within tolerance: %d", p.Value, p.Target, p.Replicas)
	}
	return fmt.Sprintf("%.4g of target %.4g (ratio %.3g) asks %d", p.Value, p.Target, p.Ratio, p.Replicas)
}

// Floor is the highest floor among the schedules open at now, and the
// name (or cron) of the schedule that sets it. A schedule whose cron or
// time zone does not parse is never open (admission refuses those).
func (c *Schedules) Floor(schedules []api.ScalerSchedule, now time.Time) (int32, string) {
	var floor int32
	name := ""
	for _, sc := range schedules {
		if !c.Open(sc, now) || sc.Replicas <= floor {
			continue
		}
		floor = sc.Replicas
		name = sc.Name
		if name == "" {
			name = fmt.Sprintf("%q", sc.Cron)
		}
	}
	return floor, name
}

// Open reports whether a firing of sc's cron falls in
// (now - duration, now]: its window is open.
func (c *Schedules) Open(sc api.ScalerSchedule, now time.Time) bool {
	sched, err := c.parse(sc)
	if err != nil {
		return false
	}
	dur := time.Duration(sc.DurationSeconds) * time.Second
	next := sched.Next(now.Add(-dur))
	return !next.IsZero() && !next.After(now)
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedules remembers parsed crons: parsing, with its time zone load,
// is most of an evaluation's cost otherwise. It holds the most recently
// used ones, at most its size, so the distinct expressions of every
// Scaler ever seen do not accumulate; a result never changes, so one
// parsed again gives the same schedule. Safe for concurrent use. A nil
// *Schedules parses every time.
type Schedules struct {
	cache *lru.Cache[string, parsedCron]
}

// DefaultSchedules is how many parsed crons NewSchedules keeps by default:
// more than a region's distinct schedules, a few hundred bytes each.
const DefaultSchedules = 4096

// NewSchedules returns a cache of up to size parsed crons
// (DefaultSchedules when size <= 0).
func NewSchedules(size int) *Schedules {
	if size <= 0 {
		size = DefaultSchedules
	}
	c, err := lru.New[string, parsedCron](size)
	if err != nil { // only for a size <= 0
		panic(err)
	}
	return &Schedules{cache: c}
}

// Len is how many parsed crons c holds.
func (c *Schedules) Len() int {
	if c == nil {
		return 0
	}
	return c.cache.Len()
}

type parsedCron struct {
	s   cron.Schedule
	err error
}

func (c *Schedules) parse(sc api.ScalerSchedule) (cron.Schedule, error) {
	expr := strings.TrimSpace(sc.Cron)
	if sc.TimeZone != "" && sc.TimeZone != "UTC" {
		expr = "CRON_TZ=" + sc.TimeZone + " " + expr
	}
	if c == nil {
		return cronParser.Parse(expr)
	}
	if p, ok := c.cache.Get(expr); ok {
		return p.s, p.err
	}
	s, err := cronParser.Parse(expr)
	c.cache.Add(expr, parsedCron{s, err})
	return s, err
}

// CheckSchedule parses sc's cron and time zone fully.
func CheckSchedule(sc api.ScalerSchedule) error {
	_, err := (*Schedules)(nil).parse(sc)
	return err
}

// stabilize is the HPA's stabilizeRecommendationWithBehaviors.
func stabilize(s *api.ScalerSpec, recs []Recommendation, current, raw int32, now time.Time) int32 {
	upCut := now.Add(-window(s.Behavior.ScaleUp, 0))
	downCut := now.Add(-window(s.Behavior.ScaleDown, api.DefaultScaleDownWindowSeconds))
	up, down := raw, raw
	for _, r := range recs {
		if r.At.After(upCut) {
			up = min(up, r.Replicas)
		}
		if r.At.After(downCut) {
			down = max(down, r.Replicas)
		}
	}
	out := current
	if out < up {
		out = up
	}
	if out > down {
		out = down
	}
	return out
}

func window(r *api.ScalingRules, def int32) time.Duration {
	if r == nil || r.StabilizationWindowSeconds == nil {
		return time.Duration(def) * time.Second
	}
	return time.Duration(*r.StabilizationWindowSeconds) * time.Second
}

// limit applies the cooldown, the rate policies and min/max to target,
// returning the replicas and what limited them.
func limit(s *api.ScalerSpec, changes []Change, current, target, floor int32, now time.Time) (int32, string) {
	lo, hi := s.Min(), s.MaxReplicas
	if cd := time.Duration(s.Behavior.CooldownSeconds) * time.Second; cd > 0 && target != current {
		if last, ok := lastChange(changes); ok && now.Sub(last.At) < cd {
			// Only bounds and an open floor move the replicas in a cooldown.
			to := current
			to = max(to, min(floor, hi))
			to = min(max(to, lo), hi)
			if to != target {
				return to, fmt.Sprintf("cooldown until %s", last.At.Add(cd).UTC().Format(time.RFC3339))
			}
		}
	}
	upLimit := scaleUpLimit(s.Behavior.ScaleUp, changes, current, now)
	if upLimit < current {
		upLimit = current
	}
	downLimit := scaleDownLimit(s.Behavior.ScaleDown, changes, current, now)
	if downLimit > current {
		downLimit = current
	}
	maxAllowed, maxWhy := hi, "maxReplicas"
	if upLimit < maxAllowed {
		maxAllowed, maxWhy = upLimit, "scale-up rate policy"
	}
	minAllowed, minWhy := lo, "minReplicas"
	if f := min(floor, hi); f > minAllowed {
		// An open schedule's floor is a promise, like minReplicas: no rate
		// policy holds it back.
		minAllowed, minWhy = f, "schedule floor"
	}
	if downLimit > minAllowed {
		minAllowed, minWhy = downLimit, "scale-down rate policy"
	}
	if maxAllowed < minAllowed {
		maxAllowed = minAllowed
	}
	switch {
	case target > maxAllowed:
		return maxAllowed, maxWhy
	case target < minAllowed:
		return minAllowed, minWhy
	}
	return target, ""
}

func lastChange(changes []Change) (Change, bool) {
	if len(changes) == 0 {
		return Change{}, false
	}
	return slices.MaxFunc(changes, func(a, b Change) int { return a.At.Compare(b.At) }), true
}

// changedIn sums the replicas added and removed by changes in the last
// period.
func changedIn(changes []Change, period time.Duration, now time.Time) (added, removed int32) {
	cut := now.Add(-period)
	for _, c := range changes {
		if !c.At.After(cut) {
			continue
		}
		if c.To > c.From {
			added += c.To - c.From
		} else {
			removed += c.From - c.To
		}
	}
	return added, removed
}

// scaleUpLimit is the HPA's calculateScaleUpLimitWithScalingRules.
func scaleUpLimit(r *api.ScalingRules, changes []Change, current int32, now time.Time) int32 {
	if r == nil {
		r = &api.ScalingRules{Policies: []api.RatePolicy{{Type: api.RatePods, Value: 4, PeriodSeconds: 15}, {Type: api.RatePercent, Value: 100, PeriodSeconds: 15}}}
	}
	if r.SelectPolicy == "disabled" {
		return current
	}
	if len(r.Policies) == 0 {
		return math.MaxInt32
	}
	pick := func(a, b int32) int32 { return max(a, b) }
	result := int32(math.MinInt32)
	if r.SelectPolicy == "min" {
		pick, result = func(a, b int32) int32 { return min(a, b) }, math.MaxInt32
	}
	for _, p := range r.Policies {
		added, removed := changedIn(changes, time.Duration(p.PeriodSeconds)*time.Second, now)
		start := current - added + removed
		var proposed int32
		if p.Type == api.RatePods {
			proposed = start + p.Value
		} else {
			proposed = int32(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
		}
		result = pick(result, proposed)
	}
	return result
}

// scaleDownLimit is the HPA's calculateScaleDownLimitWithBehaviors.
func scaleDownLimit(r *api.ScalingRules, changes []Change, current int32, now time.Time) int32 {
	if r == nil {
		r = &api.ScalingRules{Policies: []api.RatePolicy{{Type: api.RatePercent, Value: 100, PeriodSeconds: 15}}}
	}
	if r.SelectPolicy == "disabled" {
		return current
	}
	if len(r.Policies) == 0 {
		return 0
	}
	// max: the policy allowing the biggest change, the lowest count.
	pick := func(a, b int32) int32 { return min(a, b) }
	result := int32(math.MaxInt32)
	if r.SelectPolicy == "min" {
		pick, result = func(a, b int32) int32 { return max(a, b) }, math.MinInt32
	}
	for _, p := range r.Policies {
		added, removed := changedIn(changes, time.Duration(p.PeriodSeconds)*time.Second, now)
		start := current - added + removed
		var proposed int32
		if p.Type == api.RatePods {
			proposed = start - p.Value
		} else {
			proposed = int32(float64(start) * (1 - float64(p.Value)/100))
		}
		result = pick(result, proposed)
	}
	return result
}

// Record returns h with d's recommendation and, when changed, the change
// applied, dropping what no window, period or cooldown of s still needs.
// h is not modified.
func Record(s *api.ScalerSpec, h History, d Decision, changed bool) History {
	keepRec := max(window(s.Behavior.ScaleUp, 0), window(s.Behavior.ScaleDown, api.DefaultScaleDownWindowSeconds))
	keepChg := time.Duration(s.Behavior.CooldownSeconds) * time.Second
	for _, r := range []*api.ScalingRules{s.Behavior.ScaleUp, s.Behavior.ScaleDown} {
		if r == nil {
			keepChg = max(keepChg, time.Duration(api.DefaultRatePeriodSeconds)*time.Second)
			continue
		}
		for _, p := range r.Policies {
			keepChg = max(keepChg, time.Duration(p.PeriodSeconds)*time.Second)
		}
	}
	out := History{
		Recommendations: make([]Recommendation, 0, len(h.Recommendations)+1),
		Changes:         make([]Change, 0, len(h.Changes)+1),
	}
	for _, r := range h.Recommendations {
		if d.At.Sub(r.At) < keepRec {
			out.Recommendations = append(out.Recommendations, r)
		}
	}
	if keepRec > 0 {
		out.Recommendations = append(out.Recommendations, Recommendation{At: d.At, Replicas: d.Raw})
	}
	for _, c := range h.Changes {
		if d.At.Sub(c.At) < keepChg {
			out.Changes = append(out.Changes, c)
		}
	}
	if changed {
		out.Changes = append(out.Changes, Change{At: d.At, From: d.Current, To: d.Desired})
	}
	return out
}
