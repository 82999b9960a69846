// Package rollout is the zone-by-zone rollout of an App's template
// changes: a pure state machine (Step) from the committed rollout
// document (api.Rollout), the App's spec and what its zones show, to the
// next document and the events of that change.
//
// # Who owns what
//
// The rollout state is one small document per App (api.Rollout) in a
// bucket with ONE writer: the aggregator, which already sees every
// shard's availability, runs the controller under its own lease. The
// document keeps the stable template (what every zone ran before the
// change) and, per zone, the revision (template hash) the zone must run.
// The propagator renders each App shard with Rollout.TemplateFor(zone,
// spec): the spec's template once the zone was given it, else the stable
// one; so a spec change reaches a zone only when the controller says so.
// Admission, the workloads bucket's writer, records the rollout
// operations (pause, resume, undo) as api.RolloutControl in the workload;
// the controller acts on each once (Rollout.Handled).
//
// # The machine
//
// A template change (spec template hash not Stable, not the target and
// not an abandoned target) starts a rollout over the zones of the
// placement in Strategy.ZoneOrder, unless only the managed sidecars
// changed: the sidecar rollout (admission) moves those zone by zone, so
// the machine takes the new template as stable at once. Zones go one at a time: a zone is
// given the target (rollout-zone-started; its availability is judged
// from the next step on), must become fully available
// (every shard applied with its revision and updated replicas available
// == desired) and stay so for the bake time (rollout-zone-done), then the
// next starts in the same step. A zone not available before the
// deadline, or crash-looping, fails: per policy the rollout pauses
// (rollout-paused), and RollbackZone returns that zone to the stable
// template, RollbackAll every zone (rollout-rolled-back). Resume retries
// the failed zone; undo returns every zone to the stable template and
// abandons the target. Scaling is allowed at any time and changes a
// zone's desired count only (the scheduler keeps dividing replicas across
// the zones; done zones get the new template's pods, zones not started
// the stable one's): the zone being updated must reach its new size, and
// a zone baking that loses full availability (a scale re-applies its
// Deployment) starts its bake again.
// Availability during a zone's update is the Deployment's: the
// propagator sets its rolling update from the App's availability budget.
package rollout

import (
	"fmt"
	"slices"
	"time"

	"atoll.dev/libs/api"
)

// ZoneObservation is what one zone shows, summed over its shards.
type ZoneObservation struct {
	// Desired is the zone's replicas in the placement.
	Desired int32
	// Current is true when every shard of the zone carries the revision
	// the rollout gives the zone (its object was applied with it and its
	// controller observed it).
	Current bool
	// UpdatedAvailable counts available pods of that revision.
	UpdatedAvailable int32
	// CrashLooping is true when pods of that revision fail or restart.
	CrashLooping bool
}

// Input is everything Step reads besides the previous document.
type Input struct {
	Key      string
	Now      time.Time
	Template *api.PodTemplate
	Strategy *api.RolloutStrategy
	// Zones are the zones of the placement.
	Zones map[string]ZoneObservation
	// Control is the latest rollout operation, nil when none.
	Control *api.RolloutControl
}

// Step returns the next rollout document and whether it differs from
// prev (which Step never changes). A changed document has Seq+1 and the
// events of that change in Events.
func Step(prev *api.Rollout, in Input) (*api.Rollout, bool) {
	target := api.TemplateHash(in.Template)
	if prev == nil {
		return &api.Rollout{Key: in.Key, Phase: api.RolloutComplete, Stable: target,
			StableTemplate: in.Template, Seq: 1, Updated: in.Now, Zones: doneZones(in, target)}, true
	}
	m := &machine{r: clone(prev), in: in, target: target}
	m.step()
	if !m.changed {
		return prev, false
	}
	m.r.Seq = prev.Seq + 1
	m.r.Events = m.events
	m.r.Updated = in.Now
	return m.r, true
}

type machine struct {
	r       *api.Rollout
	in      Input
	target  string
	events  []api.RolloutEvent
	changed bool
}

func (m *machine) emit(event, zone, msg string) {
	m.events = append(m.events, api.RolloutEvent{Event: event, Zone: zone, Message: msg})
	m.changed = true
}

func (m *machine) step() {
	r := m.r
	m.control()
	switch {
	case m.target == r.Stable:
		if r.Target != "" || r.Abandoned != "" || r.Phase != api.RolloutComplete {
			// The spec went back to the stable template: nothing to roll.
			m.complete(r.StableTemplate, "the template is the stable one again")
		}
	case m.target != r.Target && m.target != r.Abandoned && sidecarsOnly(r.StableTemplate, m.in.Template):
		// The managed sidecars are the platform's: their own rollout
		// (admission's sidecar rollout) orders and gates the zones, and
		// the propagator renders each zone with the sidecars it decides.
		m.complete(m.in.Template, "only the managed sidecars changed: the sidecar rollout moves the zones")
	case m.target != r.Target && m.target != r.Abandoned:
		m.start()
	}
	m.syncZones()
	if r.Phase == api.RolloutProgressing {
		m.advance()
	}
}

// control acts on a rollout operation not yet handled.
func (m *machine) control() {
	c, r := m.in.Control, m.r
	if c == nil || !c.At.After(r.Handled) {
		return
	}
	r.Handled = c.At
	m.changed = true
	switch c.Op {
	case api.OpRolloutPause:
		if r.Phase == api.RolloutProgressing {
			r.Phase, r.Message = api.RolloutPaused, "paused by a user"
			m.emit(api.EventRolloutPaused, "", r.Message)
		}
	case api.OpRolloutResume:
		if r.Phase == api.RolloutPaused {
			r.Phase, r.Message = api.RolloutProgressing, ""
			for i := range r.Zones {
				if z := &r.Zones[i]; z.State == api.ZoneFailed || z.State == api.ZoneRolledBack {
					z.State, z.Message = api.ZonePending, "" // started again by advance
				}
			}
		}
	case api.OpRolloutUndo:
		if r.Target != "" {
			m.rollbackAll("undone by a user")
		}
	}
}

// start begins a rollout of the spec's template over the placement's zones.
func (m *machine) start() {
	r := m.r
	r.Target, r.Abandoned, r.Message = m.target, "", ""
	r.Phase = api.RolloutProgressing
	if c := m.in.Control; c != nil && c.Paused {
		r.Phase, r.Message = api.RolloutPaused, "paused by a user"
	}
	r.Zones = nil
	for _, z := range m.in.Strategy.ZoneOrder(zoneNames(m.in.Zones)) {
		r.Zones = append(r.Zones, api.ZoneRollout{Zone: z, State: api.ZonePending, Revision: r.Stable})
	}
	m.changed = true
}

// syncZones adds the placement's new zones (pending, last) and drops zones
// no longer placed.
func (m *machine) syncZones() {
	r := m.r
	kept := r.Zones[:0:0]
	for _, z := range r.Zones {
		if _, ok := m.in.Zones[z.Zone]; ok {
			kept = append(kept, z)
		} else {
			m.changed = true
		}
	}
	r.Zones = kept
	for _, name := range m.in.Strategy.ZoneOrder(zoneNames(m.in.Zones)) {
		if r.Zone(name) != nil {
			continue
		}
		z := api.ZoneRollout{Zone: name, State: api.ZonePending, Revision: r.Stable}
		if r.Phase == api.RolloutComplete {
			z.State = api.ZoneDone
		}
		r.Zones = append(r.Zones, z)
		m.changed = true
	}
}

// advance moves the first zone not done along, and the next ones while
// zones finish in this step.
func (m *machine) advance() {
	r, now := m.r, m.in.Now
	for i := range r.Zones {
		z := &r.Zones[i]
		if z.State == api.ZoneDone {
			continue
		}
		if z.State == api.ZonePending {
			z.State, z.Revision, z.Started, z.AvailableSince, z.Finished = api.ZoneUpdating, m.target, now, time.Time{}, time.Time{}
			m.emit(api.EventRolloutZoneStarted, z.Zone, fmt.Sprintf("zone %s: rolling out template %s", z.Zone, m.target))
			// What the zone shows now predates the change: look next step.
			return
		}
		obs := m.in.Zones[z.Zone]
		if obs.Current && obs.UpdatedAvailable >= obs.Desired && !obs.CrashLooping {
			if z.AvailableSince.IsZero() {
				z.State, z.AvailableSince = api.ZoneBaking, now
				m.changed = true
			}
			if now.Sub(z.AvailableSince) < m.in.Strategy.Bake() {
				return
			}
			z.State, z.Finished = api.ZoneDone, now
			m.emit(api.EventRolloutZoneDone, z.Zone, fmt.Sprintf("zone %s: %d replicas available on template %s", z.Zone, obs.Desired, m.target))
			continue
		}
		if !z.AvailableSince.IsZero() || z.State != api.ZoneUpdating {
			z.State, z.AvailableSince = api.ZoneUpdating, time.Time{}
			m.changed = true
		}
		switch {
		case obs.CrashLooping:
			m.fail(z, fmt.Sprintf("zone %s: pods of template %s are crash-looping", z.Zone, m.target))
		case now.Sub(z.Started) >= m.in.Strategy.Deadline():
			m.fail(z, fmt.Sprintf("zone %s: %d of %d replicas available on template %s after %s",
				z.Zone, obs.UpdatedAvailable, obs.Desired, m.target, m.in.Strategy.Deadline()))
		}
		return
	}
	m.complete(m.in.Template, "")
}

// fail applies the failure policy to zone z.
func (m *machine) fail(z *api.ZoneRollout, msg string) {
	r := m.r
	z.State, z.Finished, z.Message = api.ZoneFailed, m.in.Now, msg
	switch m.in.Strategy.Policy() {
	case api.RolloutRollbackAll:
		r.Phase, r.Message = api.RolloutPaused, msg
		m.emit(api.EventRolloutPaused, z.Zone, msg)
		m.rollbackAll(msg)
	case api.RolloutRollbackZone:
		z.State, z.Revision = api.ZoneRolledBack, r.Stable
		r.Phase, r.Message = api.RolloutPaused, msg
		m.emit(api.EventRolloutPaused, z.Zone, msg)
		m.emit(api.EventRolloutRolledBack, z.Zone, "zone "+z.Zone+" back on template "+r.Stable)
	default:
		r.Phase, r.Message = api.RolloutPaused, msg
		m.emit(api.EventRolloutPaused, z.Zone, msg)
	}
}

// rollbackAll returns every zone to the stable template and abandons the
// target.
func (m *machine) rollbackAll(why string) {
	r := m.r
	var zones []string
	for i := range r.Zones {
		z := &r.Zones[i]
		if z.Revision != r.Stable || z.State != api.ZonePending {
			zones = append(zones, z.Zone)
			z.State, z.Finished = api.ZoneRolledBack, m.in.Now
		}
		z.Revision = r.Stable
	}
	r.Abandoned, r.Target = r.Target, ""
	r.Phase, r.Message = api.RolloutRolledBack, why
	m.emit(api.EventRolloutRolledBack, "", fmt.Sprintf("zones %v back on template %s: %s", zones, r.Stable, why))
}

// complete makes tmpl the stable template of every zone.
func (m *machine) complete(tmpl *api.PodTemplate, msg string) {
	r := m.r
	r.Stable, r.StableTemplate = api.TemplateHash(tmpl), tmpl
	r.Target, r.Abandoned, r.Message = "", "", msg
	r.Phase = api.RolloutComplete
	for i := range r.Zones {
		r.Zones[i].State, r.Zones[i].Revision = api.ZoneDone, r.Stable
	}
	m.changed = true
}

// sidecarsOnly says whether b differs from a in its managed sidecars
// only; false when a is unknown.
func sidecarsOnly(a, b *api.PodTemplate) bool {
	if a == nil || b == nil {
		return false
	}
	ac, bc := *a, *b
	ac.Sidecars, bc.Sidecars = nil, nil
	return api.TemplateHash(&ac) == api.TemplateHash(&bc)
}

func doneZones(in Input, rev string) []api.ZoneRollout {
	var out []api.ZoneRollout
	for _, z := range in.Strategy.ZoneOrder(zoneNames(in.Zones)) {
		out = append(out, api.ZoneRollout{Zone: z, State: api.ZoneDone, Revision: rev})
	}
	return out
}

func zoneNames(zs map[string]ZoneObservation) []string {
	out := make([]string, 0, len(zs))
	for z := range zs {
		out = append(out, z)
	}
	slices.Sort(out)
	return out
}

func clone(r *api.Rollout) *api.Rollout {
	c := *r
	c.Zones = slices.Clone(r.Zones)
	c.Events = nil
	return &c
}
