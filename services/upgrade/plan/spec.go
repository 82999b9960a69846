// Package plan is the upgrade service's pure core: the rotation plan
// (Spec), its validation, the rounding of wave sizes, maintenance windows
// with time zones, the stored progress of a plan (Progress) and the two
// decision functions the service runs on every tick:
//
//   - Advance (wave.go) moves the plan: which cluster, pool and wave is
//     current, which nodes start now, when a wave soaks, when the SLO gate
//     or an operator pauses it, when it is done or aborted.
//   - Step (node.go) moves one node through lease, surge, cordon, drain,
//     replace and wait, returning the single side effect to perform next.
//
// Both are functions of (spec, stored progress, observations, now): no
// clock, no I/O, so they are table-tested with fixed times. The service
// writes the progress they return BEFORE it performs the side effect they
// name (record, then act), and every side effect is idempotent given the
// record (a cordon is issued only on a schedulable node, a drain pass
// skips the pods it evicted before and pods already terminating, a
// replacement's name is recorded before the provider is called), which is
// what lets a standby resume a plan exactly where a dead leader left it.
//
// # Rounding
//
// A pool's wave may take MaxUnavailable nodes out of service and create
// MaxSurge replacements ahead of the nodes they replace. Both are counts
// ("2") or percentages of the pool's nodes ("25%"): max unavailable rounds
// DOWN but never below one (as libs/disruption's budgets and Cluster
// API's health checks do), max surge rounds UP (as Kubernetes' rolling
// updates do). A wave is MaxUnavailable + MaxSurge nodes; its first
// MaxSurge nodes are surged (replacement Ready before the cordon), so at
// most MaxUnavailable nodes are unavailable at once. A pool of one node
// is always surged: its only node is never drained first.
//
// # Windows
//
// A Window is days of the week, a start and an end (HH:MM) in a time
// zone; an end before the start spans midnight and belongs to the day it
// starts. With windows set, a wave never starts outside one and no node
// of a wave starts outside one; when a window closes mid-wave, the nodes
// already started finish (a half-drained node is worse than a finished
// one) and the wave's other nodes wait for the next window.
//
// # Pause, resume, abort, rollback
//
// An operator's Control is read every tick. Pause starts no new node;
// nodes past their lease finish (the same finish rule as a window). The
// SLO gate (a breach: pause; a breach being confirmed: Hold, nothing new
// starts and no soak ends) and a node (drain deadline with policy pause,
// a replacement never Ready) pause a plan on their own; any pause is
// lifted by a resume given after it (Control.ResumeSeq), and a resumed
// plan soaks again before its next wave. A gate pause with rollback
// uncordon rolls back the in-flight nodes whose drain has not finished
// (uncordoned if this service cordoned them, released); they are rotated
// again after a resume. Abort rolls back the same way and ends the plan.
package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Drain deadline policies.
const (
	// DrainSkip uncordons the node, leaves it on the old version and goes
	// on with the wave.
	DrainSkip = "skip"
	// DrainForce deletes the pods the budgets still protect.
	DrainForce = "force"
	// DrainPause pauses the plan; the node stays cordoned until resumed or
	// aborted.
	DrainPause = "pause"
)

// Rollback policies, applied when the SLO gate pauses the plan or it is
// aborted.
const (
	// RollbackUncordon uncordons the in-flight nodes whose drain has not
	// finished and releases them.
	RollbackUncordon = "uncordon"
	// RollbackNone leaves in-flight nodes as they are (a pause holds them).
	RollbackNone = "none"
)

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration struct{ time.Duration }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	d.Duration = v
	return nil
}

// Spec is a rotation plan.
type Spec struct {
	// Name names the plan (a KV key token).
	Name string `json:"name"`
	// Target is the node label and value every rotated node ends with.
	Target Target `json:"target"`
	// Clusters are rotated one after the other, in order: the first is
	// the canary; a failure there stops the rest.
	Clusters []ClusterStep `json:"clusters"`
	// Soak is how long the SLO gate must hold after each wave.
	Soak Duration `json:"soak"`
	// Windows, when set, are the only times a wave or node may start.
	Windows []Window `json:"windows,omitempty"`
	// DrainDeadline bounds a node's drain (default 10m); past it the
	// DrainPolicy applies.
	DrainDeadline Duration `json:"drainDeadline"`
	// DrainPolicy is skip, force or pause (default pause).
	DrainPolicy string `json:"drainPolicy,omitempty"`
	// Rollback is uncordon or none (default uncordon).
	Rollback string `json:"rollback,omitempty"`
	// ClusterBudget, when set, bounds the nodes of a cluster unavailable
	// at once counting every owner of the disruption ledger (remediation's
	// nodes, NotReady nodes): a count or a percentage rounded down, never
	// below one (libs/disruption.Limit). Set it to the remediation
	// policy's cluster budget to share one budget.
	ClusterBudget string `json:"clusterBudget,omitempty"`
	// ReadyTimeout bounds the wait for a replacement to become Ready
	// (default 10m); past it the plan pauses.
	ReadyTimeout Duration `json:"readyTimeout"`
}

// Target is the node label a rotation sets.
type Target struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// ClusterStep is one member cluster of a plan and its pools in order.
type ClusterStep struct {
	Name  string     `json:"name"`
	Pools []PoolStep `json:"pools"`
}

// PoolStep is one node pool (label atoll.dev/pool) and its wave shape.
type PoolStep struct {
	Name           string `json:"name"`
	MaxUnavailable string `json:"maxUnavailable,omitempty"`
	MaxSurge       string `json:"maxSurge,omitempty"`
}

// Default fills the defaults in.
func (s *Spec) Default() {
	if s.DrainDeadline.Duration == 0 {
		s.DrainDeadline.Duration = 10 * time.Minute
	}
	if s.ReadyTimeout.Duration == 0 {
		s.ReadyTimeout.Duration = 10 * time.Minute
	}
	if s.DrainPolicy == "" {
		s.DrainPolicy = DrainPause
	}
	if s.Rollback == "" {
		s.Rollback = RollbackUncordon
	}
	for i := range s.Clusters {
		for j := range s.Clusters[i].Pools {
			if p := &s.Clusters[i].Pools[j]; p.MaxUnavailable == "" && p.MaxSurge == "" {
				p.MaxUnavailable = "1"
			}
		}
	}
}

// FieldError is a validation error naming the field.
type FieldError struct{ Field, Msg string }

func (e FieldError) Error() string { return e.Field + ": " + e.Msg }

// Validate reports every invalid field (errors.Join of FieldErrors).
func (s *Spec) Validate() error {
	var errs []error
	bad := func(f, format string, a ...any) { errs = append(errs, FieldError{f, fmt.Sprintf(format, a...)}) }
	if !token(s.Name) {
		bad("name", "want lowercase letters, digits and dashes")
	}
	if s.Target.Label == "" || s.Target.Value == "" {
		bad("target", "label and value are required")
	}
	if len(s.Clusters) == 0 {
		bad("clusters", "at least one cluster")
	}
	seen := map[string]bool{}
	for i, c := range s.Clusters {
		f := fmt.Sprintf("clusters[%d]", i)
		if !token(c.Name) || seen[c.Name] {
			bad(f+".name", "missing, malformed or repeated")
		}
		seen[c.Name] = true
		if len(c.Pools) == 0 {
			bad(f+".pools", "at least one pool")
		}
		for j, p := range c.Pools {
			pf := fmt.Sprintf("%s.pools[%d]", f, j)
			if p.Name == "" {
				bad(pf+".name", "required")
			}
			u, err1 := parseLimit(p.MaxUnavailable)
			sg, err2 := parseLimit(p.MaxSurge)
			if err1 != nil {
				bad(pf+".maxUnavailable", "%v", err1)
			}
			if err2 != nil {
				bad(pf+".maxSurge", "%v", err2)
			}
			if err1 == nil && err2 == nil && u.zero() && sg.zero() {
				bad(pf, "maxUnavailable and maxSurge cannot both be 0")
			}
		}
	}
	if _, err := parseLimit(s.ClusterBudget); err != nil {
		bad("clusterBudget", "%v", err)
	}
	if s.Soak.Duration < 0 {
		bad("soak", "negative")
	}
	for i, w := range s.Windows {
		if err := w.Validate(); err != nil {
			bad(fmt.Sprintf("windows[%d]", i), "%v", err)
		}
	}
	switch s.DrainPolicy {
	case "", DrainSkip, DrainForce, DrainPause:
	default:
		bad("drainPolicy", "want skip, force or pause")
	}
	switch s.Rollback {
	case "", RollbackUncordon, RollbackNone:
	default:
		bad("rollback", "want uncordon or none")
	}
	return errors.Join(errs...)
}

func token(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

type limit struct {
	n   int
	pct bool
}

func (l limit) zero() bool { return l.n == 0 }

func parseLimit(s string) (limit, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return limit{}, nil
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 100 {
			return limit{}, fmt.Errorf("%q: want 0%% to 100%%", s)
		}
		return limit{n, true}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return limit{}, fmt.Errorf("%q: want a count or a percentage", s)
	}
	return limit{n, false}, nil
}

// MaxUnavailable is how many of a pool's total nodes a wave may take out
// of service at once: a count as is (at most total), a percentage rounded
// DOWN but never below one.
func MaxUnavailable(s string, total int) (int, error) {
	l, err := parseLimit(s)
	if err != nil {
		return 0, err
	}
	n := l.n
	if l.pct {
		n = total * l.n / 100
		if n < 1 && l.n > 0 && total > 0 {
			n = 1
		}
	}
	return min(n, total), nil
}

// MaxSurge is how many replacements a wave may create ahead of the nodes
// they replace: a count as is (at most total), a percentage rounded UP.
func MaxSurge(s string, total int) (int, error) {
	l, err := parseLimit(s)
	if err != nil {
		return 0, err
	}
	n := l.n
	if l.pct {
		n = (total*l.n + 99) / 100
	}
	return min(n, total), nil
}

// Window is a recurring maintenance window.
type Window struct {
	// Days are the weekdays it opens on ("Mon", ..., "Sun"); empty: every day.
	Days []string `json:"days,omitempty"`
	// Start and End are HH:MM in TimeZone; End before Start spans midnight.
	Start string `json:"start"`
	End   string `json:"end"`
	// TimeZone is an IANA name ("Europe/Paris"); empty is UTC.
	TimeZone string `json:"timeZone,omitempty"`
}

var weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

func clockMinutes(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, fmt.Errorf("%q: want HH:MM", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// Validate reports a malformed window.
func (w Window) Validate() error {
	if _, err := time.LoadLocation(w.TimeZone); err != nil {
		return fmt.Errorf("timeZone %q: %w", w.TimeZone, err)
	}
	s, err := clockMinutes(w.Start)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	e, err := clockMinutes(w.End)
	if err != nil {
		return fmt.Errorf("end: %w", err)
	}
	if s == e {
		return errors.New("start and end are equal")
	}
	for _, d := range w.Days {
		if _, ok := weekdays[strings.ToLower(d)]; !ok {
			return fmt.Errorf("day %q: want Mon..Sun", d)
		}
	}
	return nil
}

// Contains reports whether t falls inside the window. A malformed window
// contains nothing.
func (w Window) Contains(t time.Time) bool {
	if w.Validate() != nil {
		return false
	}
	loc, _ := time.LoadLocation(w.TimeZone)
	lt := t.In(loc)
	m := lt.Hour()*60 + lt.Minute()
	s, _ := clockMinutes(w.Start)
	e, _ := clockMinutes(w.End)
	on := func(d time.Weekday) bool {
		if len(w.Days) == 0 {
			return true
		}
		for _, x := range w.Days {
			if weekdays[strings.ToLower(x)] == d {
				return true
			}
		}
		return false
	}
	if s < e {
		return m >= s && m < e && on(lt.Weekday())
	}
	// Spans midnight: the part after midnight belongs to the day before.
	if m >= s {
		return on(lt.Weekday())
	}
	return m < e && on((lt.Weekday()+6)%7)
}

// InWindow reports whether t is inside one of windows; no windows means
// always.
func InWindow(windows []Window, t time.Time) bool {
	if len(windows) == 0 {
		return true
	}
	for _, w := range windows {
		if w.Contains(t) {
			return true
		}
	}
	return false
}
