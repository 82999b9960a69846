package remediation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"atoll.dev/libs/disruption"
)

// Phase is where a node is in its escalation.
type Phase string

// Phases, in escalation order.
const (
	// PhaseHealthy: no unhealthy condition seen.
	PhaseHealthy Phase = "Healthy"
	// PhaseUnhealthy: an unhealthy condition seen; waiting for its
	// duration, or for a gate (pause, breaker, rate, budget) to open.
	PhaseUnhealthy Phase = "Unhealthy"
	// PhaseCordoned: cordoned by this service, waiting DrainAfter.
	PhaseCordoned Phase = "Cordoned"
	// PhaseDraining: evicting pods, pass after pass.
	PhaseDraining Phase = "Draining"
	// PhaseReplacing: a replacement made through the provider; waiting
	// for it to become Ready.
	PhaseReplacing Phase = "Replacing"
	// PhaseReplaced: the replacement is Ready, the node gone. Final.
	PhaseReplaced Phase = "Replaced"
	// PhaseNeedsHuman: the escalation gave up (drain past its deadline
	// under the stop policy, replacements that never became Ready). Final
	// until a human acts on the node (uncordons it, deletes it).
	PhaseNeedsHuman Phase = "NeedsHuman"
)

// Action is what the I/O side does after a Step.
type Action string

// Actions.
const (
	ActNone Action = ""
	// ActStart: check the gates (pause, breaker, token bucket, ledger),
	// then cordon and call NodeState.Started.
	ActStart Action = "start"
	// ActDrain: run one drain pass (forced when Drain.Force) and call
	// NodeState.Drained.
	ActDrain Action = "drain"
	// ActReplace: call the provider for Replace.Name (idempotent).
	ActReplace Action = "replace"
	// ActRetryReplace: call NodeState.NextReplacement, then the provider:
	// the next replacement replaces the one that never became Ready.
	ActRetryReplace Action = "retry-replace"
	// ActStop: the node recovered mid-escalation: uncordon it when this
	// service cordoned it, and release its disruption lease.
	ActStop Action = "stop"
	// ActRelease: release the disruption lease (the escalation is over).
	ActRelease Action = "release"
	// ActForget: the node is gone and nothing is left to do: drop its
	// state (and lease).
	ActForget Action = "forget"
)

// Node events, published on bus.NodeSubject(cluster, node, event) in the
// order they happen.
const (
	EvUnhealthy         = "unhealthy"
	EvRecovered         = "recovered"
	EvFlapping          = "flapping"
	EvCordoned          = "cordoned"
	EvDraining          = "draining"
	EvDrainBlocked      = "drain-blocked"
	EvDrainDeadline     = "drain-deadline"
	EvDrained           = "drained"
	EvReplacing         = "replacing"
	EvReplacementFailed = "replacement-failed"
	EvReplaced          = "replaced"
	EvNeedsHuman        = "needs-human"
	EvUncordoned        = "uncordoned"
	EvGone              = "gone"
)

// ReplacedRetention is how long the state of a replaced node is kept,
// for its history.
const ReplacedRetention = time.Hour

// MaxHistory bounds a node's history.
const MaxHistory = 32

// Entry is one event in a node's history.
type Entry struct {
	// Seq numbers the node's events from 1; with the node's UID it is
	// the event's idempotency key.
	Seq     int       `json:"seq"`
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Message string    `json:"message,omitempty"`
}

// DrainState is a drain's progress, kept so a standby resumes it.
type DrainState struct {
	Started  time.Time `json:"started,omitzero"`
	Passes   int       `json:"passes,omitempty"`
	NextPass time.Time `json:"nextPass,omitzero"`
	// Evicted are the pods evicted so far (never evicted again).
	Evicted []disruption.PodRef `json:"evicted,omitempty"`
	// Blocked are the pods the last pass could not evict, each with the
	// PodDisruptionBudget that blocks it.
	Blocked []disruption.Blocked `json:"blocked,omitempty"`
	// Force says the deadline passed under the force policy.
	Force bool `json:"force,omitempty"`
}

// ReplaceState is a replacement's progress.
type ReplaceState struct {
	Attempt int       `json:"attempt,omitempty"`
	Name    string    `json:"name,omitempty"`
	Started time.Time `json:"started,omitzero"`
	// Prev is the previous attempt's replacement, which this one
	// replaces (the node itself is gone by then).
	Prev string `json:"prev,omitempty"`
	// Done says the provider call for this attempt returned.
	Done bool `json:"done,omitempty"`
}

// NodeState is what the service knows and does about one node, keyed by
// its UID; the value of NodeKey in the remediation bucket.
type NodeState struct {
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
	UID     string `json:"uid"`
	Pool    string `json:"pool,omitempty"`
	Zone    string `json:"zone,omitempty"`

	Phase      Phase     `json:"phase"`
	PhaseSince time.Time `json:"phaseSince,omitzero"`
	// Signal is the unhealthy condition seen ("Ready=False").
	Signal string `json:"signal,omitempty"`
	// UnhealthySince is when this service first saw the node unhealthy
	// (never the condition's lastTransitionTime); zero while healthy.
	UnhealthySince time.Time `json:"unhealthySince,omitzero"`
	// Waiting says why nothing happens now (the duration, a gate).
	Waiting string `json:"waiting,omitempty"`
	// Transitions are the health changes within the flap window.
	Transitions []time.Time `json:"transitions,omitempty"`
	Flapping    bool        `json:"flapping,omitempty"`

	Drain   DrainState   `json:"drain,omitzero"`
	Replace ReplaceState `json:"replace,omitzero"`

	History []Entry `json:"history,omitempty"`
}

// Observation is what the informer says of a node now.
type Observation struct {
	// Present: the node (this UID) exists.
	Present bool
	// Unhealthy: a configured condition is in an unhealthy status;
	// Signal names it.
	Unhealthy bool
	Signal    string
	// WatchSince is when the cluster's watch last became healthy: the
	// unhealthy clock never starts before it, so nothing seen (or not
	// seen) while the API server was unreachable counts.
	WatchSince time.Time
	// Cordoned: spec.unschedulable; CordonedByUs: with this service's
	// annotation.
	Cordoned, CordonedByUs bool
	// ReplacementReady: the node Replace.Name exists and is Ready.
	ReplacementReady bool
}

// Flap is the flap detector's setting.
type Flap struct {
	Transitions int
	Window      time.Duration
}

// Step advances s from what o says at now and returns what to do. It is
// pure: the I/O side performs the action and reports its outcome through
// Started, Drained, Replaced or NextReplacement.
func Step(s *NodeState, o Observation, now time.Time, st Steps, f Flap) Action {
	s.Waiting = ""
	final := s.Phase == PhaseReplacing || s.Phase == PhaseReplaced || s.Phase == PhaseNeedsHuman
	if !o.Present && !final {
		if s.Phase != PhaseHealthy && s.Phase != PhaseUnhealthy {
			s.event(now, EvGone, "node deleted during "+string(s.Phase))
		}
		return ActForget
	}
	if o.Present && !final {
		s.observeHealth(o, now, f)
	}
	switch s.Phase {
	case PhaseReplaced:
		if now.Sub(s.PhaseSince) >= ReplacedRetention {
			return ActForget
		}
		return ActNone
	case PhaseNeedsHuman:
		switch {
		case !o.Present:
			return ActForget // a human deleted it
		case !o.Cordoned:
			// A human uncordoned it: start over from what it shows.
			s.setPhase(PhaseHealthy, now)
			s.UnhealthySince, s.Drain, s.Replace = time.Time{}, DrainState{}, ReplaceState{}
			s.event(now, EvUncordoned, "by a human")
			return ActRelease
		}
		return ActNone
	case PhaseHealthy:
		if !o.Unhealthy {
			return ActNone
		}
		s.setPhase(PhaseUnhealthy, now)
		fallthrough
	case PhaseUnhealthy:
		if !o.Unhealthy {
			s.setPhase(PhaseHealthy, now)
			return ActNone
		}
		d := conditionFor(st, s.Signal)
		since := s.UnhealthySince
		if o.WatchSince.After(since) {
			since = o.WatchSince
		}
		switch {
		case s.Flapping:
			s.Waiting = fmt.Sprintf("flapping: %d health changes within %s", len(s.Transitions), f.Window)
			return ActNone
		case now.Sub(since) < d:
			s.Waiting = fmt.Sprintf("unhealthy for %s of %s", now.Sub(since).Round(time.Second), d)
			return ActNone
		case o.Cordoned && !o.CordonedByUs:
			s.Waiting = "cordoned by a human: left alone"
			return ActNone
		}
		return ActStart
	case PhaseCordoned, PhaseDraining:
		if !o.Unhealthy {
			s.setPhase(PhaseHealthy, now)
			return ActStop
		}
		if s.Phase == PhaseCordoned {
			if now.Sub(s.PhaseSince) < st.DrainAfter.D() {
				s.Waiting = fmt.Sprintf("cordoned; drain in %s", (st.DrainAfter.D() - now.Sub(s.PhaseSince)).Round(time.Second))
				return ActNone
			}
			s.setPhase(PhaseDraining, now)
			s.Drain = DrainState{Started: now, NextPass: now}
			s.event(now, EvDraining, "")
		}
		if !s.Drain.Force && now.Sub(s.Drain.Started) >= st.DrainDeadline.D() {
			why := fmt.Sprintf("drain past its deadline of %s%s", st.DrainDeadline.D(), s.blockers())
			if st.DrainPolicy == DrainForce {
				s.Drain.Force = true
				s.event(now, EvDrainDeadline, why+"; forcing")
				return ActDrain
			}
			s.event(now, EvDrainDeadline, why)
			s.setPhase(PhaseNeedsHuman, now)
			s.event(now, EvNeedsHuman, why)
			return ActNone
		}
		if now.Before(s.Drain.NextPass) {
			s.Waiting = "drain retry in " + s.Drain.NextPass.Sub(now).Round(time.Second).String() + s.blockers()
			return ActNone
		}
		return ActDrain
	case PhaseReplacing:
		if o.ReplacementReady {
			s.setPhase(PhaseReplaced, now)
			s.event(now, EvReplaced, "by "+s.Replace.Name)
			return ActRelease
		}
		if now.Sub(s.Replace.Started) >= st.ReplaceTimeout.D() {
			msg := fmt.Sprintf("%s not Ready within %s (attempt %d of %d)", s.Replace.Name, st.ReplaceTimeout.D(), s.Replace.Attempt, st.ReplaceAttempts)
			s.event(now, EvReplacementFailed, msg)
			if s.Replace.Attempt >= st.ReplaceAttempts {
				s.setPhase(PhaseNeedsHuman, now)
				s.event(now, EvNeedsHuman, "no replacement became Ready")
				return ActRelease
			}
			return ActRetryReplace
		}
		if !s.Replace.Done || o.Present {
			return ActReplace
		}
		s.Waiting = "waiting for " + s.Replace.Name + " to become Ready"
		return ActNone
	}
	return ActNone
}

// observeHealth records a health change, and whether the node flaps.
func (s *NodeState) observeHealth(o Observation, now time.Time, f Flap) {
	was := !s.UnhealthySince.IsZero()
	if o.Unhealthy != was {
		s.Transitions = append(s.Transitions, now)
		if o.Unhealthy {
			s.UnhealthySince, s.Signal = now, o.Signal
			s.event(now, EvUnhealthy, o.Signal)
		} else {
			s.UnhealthySince = time.Time{}
			s.event(now, EvRecovered, "")
		}
	} else if o.Unhealthy && o.Signal != s.Signal {
		// Unknown -> False (a reboot) does not restart the clock.
		s.Signal = o.Signal
	}
	s.Transitions = slices.DeleteFunc(s.Transitions, func(t time.Time) bool { return now.Sub(t) >= f.Window })
	flapping := f.Transitions > 0 && len(s.Transitions) >= f.Transitions
	if flapping && !s.Flapping {
		s.event(now, EvFlapping, fmt.Sprintf("%d health changes within %s: never acted on while it lasts", len(s.Transitions), f.Window))
	}
	s.Flapping = flapping
}

// Started records that the node was cordoned: the escalation began.
func (s *NodeState) Started(now time.Time, gates string) {
	s.setPhase(PhaseCordoned, now)
	s.event(now, EvCordoned, gates)
}

// Drained records one drain pass: done, the replacement comes next;
// otherwise the next pass waits a backoff that doubles per pass.
func (s *NodeState) Drained(now time.Time, r disruption.DrainResult, st Steps) {
	s.Drain.Passes++
	s.Drain.Evicted = append(s.Drain.Evicted, r.Evicted...)
	s.Drain.Evicted = append(s.Drain.Evicted, r.Deleted...)
	if r.Done() {
		s.Drain.Blocked = nil
		s.event(now, EvDrained, fmt.Sprintf("%d pods evicted in %d passes", len(s.Drain.Evicted), s.Drain.Passes))
		s.setPhase(PhaseReplacing, now)
		s.Replace = ReplaceState{Attempt: 1, Started: now}
		s.event(now, EvReplacing, "attempt 1")
		return
	}
	if len(r.Blocked) > 0 && !sameBlockers(s.Drain.Blocked, r.Blocked) {
		s.Drain.Blocked = r.Blocked
		s.event(now, EvDrainBlocked, strings.TrimPrefix(s.blockers(), "; "))
	} else if len(r.Blocked) == 0 {
		s.Drain.Blocked = nil
	}
	backoff := st.DrainRetry.D()
	for i := 1; i < s.Drain.Passes && backoff < st.DrainRetryMax.D(); i++ {
		backoff *= 2
	}
	if len(r.Blocked) == 0 && len(r.Failed) == 0 {
		backoff = min(backoff, time.Second) // only waiting for terminating pods
	}
	s.Drain.NextPass = now.Add(min(backoff, st.DrainRetryMax.D()))
}

// NextReplacement starts another replacement attempt, which replaces
// the previous attempt's node.
func (s *NodeState) NextReplacement(now time.Time) {
	s.Replace = ReplaceState{Attempt: s.Replace.Attempt + 1, Started: now, Prev: s.Replace.Name}
	s.event(now, EvReplacing, fmt.Sprintf("attempt %d", s.Replace.Attempt))
}

// Stopped records that the escalation stopped (the node recovered).
func (s *NodeState) Stopped(now time.Time, uncordoned bool) {
	if uncordoned {
		s.event(now, EvUncordoned, "recovered mid-escalation")
	}
	s.Drain, s.Replace = DrainState{}, ReplaceState{}
}

// Idle reports whether the state carries nothing worth keeping.
func (s *NodeState) Idle() bool {
	return s.Phase == PhaseHealthy && len(s.Transitions) == 0 && !s.Flapping
}

// Active reports whether the service is acting on the node.
func (s *NodeState) Active() bool {
	return s.Phase == PhaseCordoned || s.Phase == PhaseDraining || s.Phase == PhaseReplacing
}

func (s *NodeState) setPhase(p Phase, now time.Time) {
	if s.Phase != p {
		s.Phase, s.PhaseSince = p, now
	}
}

func (s *NodeState) event(now time.Time, ev, msg string) {
	seq := 1
	if n := len(s.History); n > 0 {
		seq = s.History[n-1].Seq + 1
	}
	s.History = append(s.History, Entry{Seq: seq, Time: now, Event: ev, Message: msg})
	if len(s.History) > MaxHistory {
		s.History = s.History[len(s.History)-MaxHistory:]
	}
}

// blockers names the budgets that block the drain, "; blocked by ..."
// or "".
func (s *NodeState) blockers() string {
	if len(s.Drain.Blocked) == 0 {
		return ""
	}
	var parts []string
	for _, b := range s.Drain.Blocked {
		pdb := b.PDB
		if pdb == "" {
			pdb = "an unknown budget"
		}
		parts = append(parts, fmt.Sprintf("pod %s/%s by PodDisruptionBudget %s", b.Pod.Namespace, b.Pod.Name, pdb))
	}
	return "; blocked: " + strings.Join(parts, ", ")
}

func sameBlockers(a, b []disruption.Blocked) bool {
	return slices.EqualFunc(a, b, func(x, y disruption.Blocked) bool { return x.Pod == y.Pod && x.PDB == y.PDB })
}

// conditionFor is the duration of the condition named by signal
// ("Ready=False"), the shortest configured when none matches.
func conditionFor(st Steps, signal string) time.Duration {
	var d time.Duration = -1
	for _, c := range st.Conditions {
		for _, status := range c.Statuses {
			if signal == string(c.Type)+"="+string(status) {
				return c.For.D()
			}
		}
		if d < 0 || c.For.D() < d {
			d = c.For.D()
		}
	}
	return max(d, 0)
}
