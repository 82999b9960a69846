package api

// Rotation plans of the upgrade service (services/upgrade): the plan an
// operator writes (RotationSpec), its defaults and validation, the
// rounding of wave sizes and maintenance windows. They live here, not in
// the service, so that the gateway validates a plan exactly as the
// service does without importing it (nor its Kubernetes dependencies);
// services/upgrade/plan aliases them and holds the decisions.
//
// A pool's wave may take MaxUnavailable nodes out of service and create
// MaxSurge replacements ahead: counts ("2") or percentages of the pool's
// nodes ("25%"); max unavailable rounds DOWN but never below one, max
// surge rounds UP. A RotationWindow is days of the week, a start and an
// end (HH:MM) in a time zone; an end before the start spans midnight and
// belongs to the day it starts.

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

// RotationDuration is a time.Duration written as a Go duration string ("30s").
type RotationDuration struct{ time.Duration }

// MarshalJSON implements json.Marshaler.
func (d RotationDuration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *RotationDuration) UnmarshalJSON(b []byte) error {
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

// RotationSpec is a rotation plan.
type RotationSpec struct {
	// Name names the plan (a KV key token).
	Name string `json:"name"`
	// RotationTarget is the node label and value every rotated node ends with.
	Target RotationTarget `json:"target"`
	// Clusters are rotated one after the other, in order: the first is
	// the canary; a failure there stops the rest.
	Clusters []RotationCluster `json:"clusters"`
	// Soak is how long the SLO gate must hold after each wave.
	Soak RotationDuration `json:"soak"`
	// Windows, when set, are the only times a wave or node may start.
	Windows []RotationWindow `json:"windows,omitempty"`
	// DrainDeadline bounds a node's drain (default 10m); past it the
	// DrainPolicy applies.
	DrainDeadline RotationDuration `json:"drainDeadline"`
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
	ReadyTimeout RotationDuration `json:"readyTimeout"`
}

// RotationTarget is the node label a rotation sets.
type RotationTarget struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// RotationCluster is one member cluster of a plan and its pools in order.
type RotationCluster struct {
	Name  string         `json:"name"`
	Pools []RotationPool `json:"pools"`
}

// RotationPool is one node pool (label atoll.dev/pool) and its wave shape.
type RotationPool struct {
	Name           string `json:"name"`
	MaxUnavailable string `json:"maxUnavailable,omitempty"`
	MaxSurge       string `json:"maxSurge,omitempty"`
}

// Default fills the defaults in.
func (s *RotationSpec) Default() {
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

// Validate reports every invalid field (FieldErrors; nil when valid).
func (s *RotationSpec) Validate() error {
	var fe FieldErrors
	bad := func(f, format string, a ...any) { fe.add(f, CodeInvalid, format, a...) }
	if !rotationToken(s.Name) {
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
		if !rotationToken(c.Name) || seen[c.Name] {
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
			u, err1 := parseRotationLimit(p.MaxUnavailable)
			sg, err2 := parseRotationLimit(p.MaxSurge)
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
	if _, err := parseRotationLimit(s.ClusterBudget); err != nil {
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
	if len(fe) == 0 {
		return nil
	}
	return fe
}

func rotationToken(s string) bool {
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

type rotationLimit struct {
	n   int
	pct bool
}

func (l rotationLimit) zero() bool { return l.n == 0 }

func parseRotationLimit(s string) (rotationLimit, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return rotationLimit{}, nil
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 100 {
			return rotationLimit{}, fmt.Errorf("%q: want 0%% to 100%%", s)
		}
		return rotationLimit{n, true}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return rotationLimit{}, fmt.Errorf("%q: want a count or a percentage", s)
	}
	return rotationLimit{n, false}, nil
}

// RotationMaxUnavailable is how many of a pool's total nodes a wave may take out
// of service at once: a count as is (at most total), a percentage rounded
// DOWN but never below one.
func RotationMaxUnavailable(s string, total int) (int, error) {
	l, err := parseRotationLimit(s)
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

// RotationMaxSurge is how many replacements a wave may create ahead of the nodes
// they replace: a count as is (at most total), a percentage rounded UP.
func RotationMaxSurge(s string, total int) (int, error) {
	l, err := parseRotationLimit(s)
	if err != nil {
		return 0, err
	}
	n := l.n
	if l.pct {
		n = (total*l.n + 99) / 100
	}
	return min(n, total), nil
}

// RotationWindow is a recurring maintenance window.
type RotationWindow struct {
	// Days are the rotationWeekdays it opens on ("Mon", ..., "Sun"); empty: every day.
	Days []string `json:"days,omitempty"`
	// Start and End are HH:MM in TimeZone; End before Start spans midnight.
	Start string `json:"start"`
	End   string `json:"end"`
	// TimeZone is an IANA name ("Europe/Paris"); empty is UTC.
	TimeZone string `json:"timeZone,omitempty"`
}

var rotationWeekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

func rotationClock(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, fmt.Errorf("%q: want HH:MM", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// Validate reports a malformed window.
func (w RotationWindow) Validate() error {
	if _, err := time.LoadLocation(w.TimeZone); err != nil {
		return fmt.Errorf("timeZone %q: %w", w.TimeZone, err)
	}
	s, err := rotationClock(w.Start)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	e, err := rotationClock(w.End)
	if err != nil {
		return fmt.Errorf("end: %w", err)
	}
	if s == e {
		return errors.New("start and end are equal")
	}
	for _, d := range w.Days {
		if _, ok := rotationWeekdays[strings.ToLower(d)]; !ok {
			return fmt.Errorf("day %q: want Mon..Sun", d)
		}
	}
	return nil
}

// Contains reports whether t falls inside the window. A malformed window
// contains nothing.
func (w RotationWindow) Contains(t time.Time) bool {
	if w.Validate() != nil {
		return false
	}
	loc, _ := time.LoadLocation(w.TimeZone)
	lt := t.In(loc)
	m := lt.Hour()*60 + lt.Minute()
	s, _ := rotationClock(w.Start)
	e, _ := rotationClock(w.End)
	on := func(d time.Weekday) bool {
		if len(w.Days) == 0 {
			return true
		}
		for _, x := range w.Days {
			if rotationWeekdays[strings.ToLower(x)] == d {
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

// RotationInWindow reports whether t is inside one of windows; no windows means
// always.
func RotationInWindow(windows []RotationWindow, t time.Time) bool {
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
