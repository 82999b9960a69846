package autoscaler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/autoscaler/recommend"
)

// Outcomes of a recorded decision.
const (
	OutcomeNone    = "none"    // nothing to change
	OutcomeScaled  = "scaled"  // admission scaled the App
	OutcomeRefused = "refused" // admission refused the scale (quota, state)
	OutcomeSkipped = "skipped" // no evaluation: the App is missing, paused or stopped
)

// State is a Scaler's document in the scalers bucket.
type State struct {
	// Scaler is the Scaler's key.
	Scaler string `json:"scaler"`
	// History is the recommender's memory.
	History recommend.History `json:"history"`
	// Decisions are the recent decisions, oldest first.
	Decisions []Record `json:"decisions,omitempty"`
	// Event is the last event this state warrants; it is published with
	// the revision of the write that recorded it (EventRev, or the
	// document's own revision while EventRev is 0).
	Event *PendingEvent `json:"event,omitempty"`
	// Refusal is the message of the last refusal announced.
	Refusal string `json:"refusal,omitempty"`
	// RefusalAt is when it was announced.
	RefusalAt time.Time `json:"refusalAt,omitzero"`
}

// PendingEvent is an event of the Scaler and whether it went out.
type PendingEvent struct {
	Name      string `json:"name"`
	Message   string `json:"message"`
	Rev       uint64 `json:"rev,omitempty"`
	Announced bool   `json:"announced,omitempty"`
}

// Record is one decision and what came of it (api.ScalerRecord: the
// gateway serves it as recorded).
type Record = api.ScalerRecord

// RefusalRepeat is how often an unchanged refusal is announced again.
const RefusalRepeat = 5 * time.Minute

// scalerState is a loaded State and what the term knows of it.
type scalerState struct {
	doc         State
	rev         uint64    // the document's revision; 0: not stored
	persisted   time.Time // when it was last written
	fingerprint string    // of the last decision written
}

// load returns the Scaler's state: from the term's memory, or the bucket.
func (t *term) load(ctx context.Context, s *Service, key string) (*scalerState, error) {
	t.mu.Lock()
	st := t.states[key]
	t.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st = &scalerState{doc: State{Scaler: key}}
	e, err := s.state.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, fmt.Errorf("read state of %s: %w", key, err)
	default:
		if err := json.Unmarshal(e.Value(), &st.doc); err != nil {
			s.log.Warn("undecodable scaler state: starting afresh", "key", key, "err", err)
			st.doc = State{Scaler: key}
		}
		st.rev = e.Revision()
		if ev := st.doc.Event; ev != nil && ev.Rev == 0 {
			ev.Rev = st.rev
		}
	}
	t.mu.Lock()
	t.states[key] = st
	t.mu.Unlock()
	return st, nil
}

// reconcile evaluates one Scaler and acts on the decision.
func (s *Service) reconcile(ctx context.Context, t *term, key string) error {
	e, ok := s.scalerM.Get(key)
	if !ok {
		t.mu.Lock()
		delete(t.states, key)
		t.mu.Unlock()
		if err := s.state.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("delete state of %s: %w", key, err)
		}
		return nil
	}
	if e.Err != nil {
		s.log.Error("undecodable scaler", "key", key, "err", e.Err)
		return nil
	}
	w := e.Value // the mirror's: read only
	sp, ok := w.Spec.(*api.ScalerSpec)
	if !ok {
		return nil
	}
	st, err := t.load(ctx, s, key)
	if err != nil {
		return err
	}
	if err := s.announce(ctx, w, st); err != nil {
		return err
	}
	now := s.cfg.Now()
	rec := Record{Generation: w.Metadata.Generation, Outcome: OutcomeNone}
	appKey := api.Key(w.Metadata.Project, api.KindApp, sp.Target)
	app, skip, err := s.target(ctx, appKey)
	if err != nil {
		return err
	}
	if skip == "" && (w.Control.Paused || w.Control.Stopped) {
		skip = "the Scaler is paused: the App keeps its replicas" // pause is how to hand-scale an autoscaled App
	}
	if owner := s.owner(appKey); skip == "" && owner != key {
		// Two writers of one App's replicas would fight (Karmada's
		// FederatedHPA and CronFederatedHPA do): one Scaler per App, the
		// first by name; the others say so.
		skip = fmt.Sprintf("the App is scaled by %s: one Scaler per App", owner)
	}
	if skip != "" {
		rec.ScalerDecision = recommend.Decision{At: now, Reason: skip}
		rec.Outcome, rec.Detail = OutcomeSkipped, skip
		return s.persist(ctx, w, st, rec, nil, now)
	}
	current := app.Pods
	in := recommend.Input{Spec: sp, Current: current, Ready: s.ready(ctx, appKey, app), History: st.doc.History, Now: now, Schedules: s.schedules}
	var arrived time.Time
	in.Samples, arrived = s.snapshot(appKey)
	d := recommend.Evaluate(in)
	s.evaluations.Add(1)
	s.own.evaluated()
	rec.ScalerDecision = d
	var ev *PendingEvent
	if d.Changed() {
		if s.OnScaleRequest != nil {
			s.OnScaleRequest(key, arrived)
		}
		s.own.requested(arrived)
		refusal, err := s.scale(ctx, w.Metadata.Project, sp.Target, d.Desired)
		switch {
		case err != nil:
			return err // the region did not answer: nothing happened, evaluate again
		case refusal != "":
			s.log.Debug("scale refused", "scaler", key, "from", d.Current, "to", d.Desired, "refusal", refusal)
			rec.Outcome, rec.Detail = OutcomeRefused, refusal
			s.own.decided(OutcomeRefused)
			msg := fmt.Sprintf("scale %s %d -> %d refused: %s (wanted because %s)", sp.Target, d.Current, d.Desired, refusal, d.Reason)
			if refusal != st.doc.Refusal || now.Sub(st.doc.RefusalAt) >= RefusalRepeat {
				ev = &PendingEvent{Name: api.EventScaleRefused, Message: msg}
				st.doc.Refusal, st.doc.RefusalAt = refusal, now
			}
		default:
			s.log.Info("scaled", "scaler", key, "from", d.Current, "to", d.Desired, "reason", d.Reason)
			rec.Outcome = OutcomeScaled
			s.own.decided(OutcomeScaled)
			ev = &PendingEvent{Name: api.EventScaled, Message: fmt.Sprintf("%s %d -> %d: %s", sp.Target, d.Current, d.Desired, d.Reason)}
			st.doc.Refusal, st.doc.RefusalAt = "", time.Time{}
		}
	}
	st.doc.History = recommend.Record(sp, st.doc.History, d, rec.Outcome == OutcomeScaled)
	return s.persist(ctx, w, st, rec, ev, now)
}

// target returns the Scaler's App, or why it cannot be scaled now; an
// error is a failed read of the bucket (an App the mirror does not cover
// yet is read there).
func (s *Service) target(ctx context.Context, appKey string) (appView, string, error) {
	ae, ok, err := lookup(ctx, s.appM, s.workloadsKV, appKey, decodeApp)
	if err != nil {
		return appView{}, "", err
	}
	if !ok {
		return appView{}, fmt.Sprintf("the App %s does not exist", appKey), nil
	}
	if ae.Err != nil {
		return appView{}, fmt.Sprintf("the App %s cannot be read", appKey), nil
	}
	app := ae.Value
	switch {
	case app.Stopped:
		return appView{}, "the App is stopped", nil
	case app.Paused:
		return appView{}, "the App is paused", nil
	}
	return app, "", nil
}

// lookup is key's entry in m, or, when m does not cover key yet (a
// Scaler just written names it), in the bucket.
func lookup[T any](ctx context.Context, m *bus.TypedMirror[T], kv jetstream.KeyValue, key string, decode func([]byte) (T, error)) (bus.Entry[T], bool, error) {
	if m.Covered(key) {
		e, ok := m.Get(key)
		return e, ok, nil
	}
	kve, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return bus.Entry[T]{}, false, nil
	}
	if err != nil {
		return bus.Entry[T]{}, false, fmt.Errorf("read %s: %w", key, err)
	}
	v, err := decode(kve.Value())
	return bus.Entry[T]{Value: v, Revision: kve.Revision(), Err: err}, true, nil
}

// owner is the Scaler that scales the App: the first by key of those
// targeting it.
func (s *Service) owner(appKey string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	owner := ""
	for k := range s.targets[appKey] {
		if owner == "" || k < owner {
			owner = k
		}
	}
	return owner
}

// ready is the App's ready pods from its status, when the status is of
// the App's generation, at most its replicas (after a scale-down the pods
// on their way out are still counted ready for a while, and would count
// as missing measurements: the HPA ignores pods being deleted); 0
// (unknown) otherwise.
func (s *Service) ready(ctx context.Context, appKey string, app appView) int32 {
	e, ok, err := lookup(ctx, s.statusM, s.statusKV, appKey, decodeStatus)
	if err != nil || !ok {
		return 0
	}
	st := e.Value
	if e.Err != nil || st.Generation != app.Generation {
		return 0
	}
	return min(st.Ready, app.Pods)
}

// snapshot copies an App's latest samples and when the newest arrived.
func (s *Service) snapshot(appKey string) (map[string]api.MetricSample, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	as := s.samples[appKey]
	if as == nil {
		return nil, time.Time{}
	}
	return as.combine(), as.arrived
}

// scale asks admission to scale the App. It returns admission's refusal
// (a 4xx answer: quota exceeded, the App gone or stopped) as a message, or
// an error when admission could not be reached.
func (s *Service) scale(ctx context.Context, project, app string, replicas int32) (string, error) {
	err := bus.AdmissionAutoscale.Send(ctx, s.req, api.Operation{Project: project, Kind: api.KindApp, Name: app, Op: api.OpScale, Replicas: &replicas})
	var re *bus.RemoteError
	if errors.As(err, &re) && re.Code >= 400 && re.Code < 500 {
		return refusalMessage(re), nil
	}
	if err != nil {
		return "", fmt.Errorf("scale %s/%s to %d: %w", project, app, replicas, err)
	}
	return "", nil
}

// refusalMessage is admission's answer as one line: the code, the
// message and, for quota, what was over.
func refusalMessage(re *bus.RemoteError) string {
	var eb api.ErrorBody
	if json.Unmarshal(re.Body, &eb) != nil || eb.Code == "" {
		return fmt.Sprintf("%s: %s", http.StatusText(re.Code), re.Description)
	}
	msg := eb.Code + ": " + eb.Message
	if q := eb.Quota; q != nil {
		msg += fmt.Sprintf(" (%s %s: limit %d, used %d, requested %d)", q.Tier, q.Resource, q.Limit, q.Used, q.Requested)
	}
	return msg
}

// fingerprint sums up a record for deciding whether to write it.
func fingerprint(r Record) string {
	b, _ := json.Marshal(struct {
		O, D          string
		C, R, S, F, T int32
		L             string
		P             []string
		G             int64
	}{r.Outcome, r.Detail, r.Current, r.Raw, r.Stabilized, r.Floor, r.Desired, r.Limited, states(r.Proposals), r.Generation})
	return string(b)
}

func states(ps []recommend.Proposal) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("%s:%s:%d", p.Metric, p.State, p.Replicas)
	}
	return out
}

// persist records rec in the state and writes it when something changed,
// an event is due or PersistEvery has passed; then publishes the event.
func (s *Service) persist(ctx context.Context, w *api.Workload, st *scalerState, rec Record, ev *PendingEvent, now time.Time) error {
	fp := fingerprint(rec)
	if ev == nil && fp == st.fingerprint && now.Sub(st.persisted) < s.cfg.PersistEvery && st.rev != 0 {
		return nil
	}
	st.doc.Decisions = append(st.doc.Decisions, rec)
	if n := len(st.doc.Decisions) - s.cfg.Decisions; n > 0 {
		st.doc.Decisions = append([]Record(nil), st.doc.Decisions[n:]...)
	}
	if ev != nil {
		st.doc.Event = ev
	}
	b, err := json.Marshal(&st.doc)
	if err != nil {
		return fmt.Errorf("encode state of %s: %w", st.doc.Scaler, err)
	}
	rev, err := bus.CompareAndSet(ctx, s.state, st.doc.Scaler, b, st.rev)
	if errors.Is(err, bus.ErrConflict) {
		// Another writer (a previous term) moved it: reload and evaluate again.
		s.forget(st.doc.Scaler)
		return fmt.Errorf("state of %s: %w", st.doc.Scaler, err)
	}
	if err != nil {
		return fmt.Errorf("write state of %s: %w", st.doc.Scaler, err)
	}
	st.rev, st.persisted, st.fingerprint = rev, now, fp
	if ev != nil {
		ev.Rev = rev
		return s.announce(ctx, w, st)
	}
	return nil
}

// forget drops a Scaler's state from the current term's memory.
func (s *Service) forget(key string) {
	if t := s.term.Load(); t != nil {
		t.mu.Lock()
		delete(t.states, key)
		t.mu.Unlock()
	}
}

// announce publishes the state's event if it has not gone out.
func (s *Service) announce(ctx context.Context, w *api.Workload, st *scalerState) error {
	ev := st.doc.Event
	if ev == nil || ev.Announced || ev.Rev == 0 {
		return nil
	}
	if err := s.events.Ensure(ctx, w, ev.Name, ev.Message, ev.Rev); err != nil {
		return fmt.Errorf("announce %s of %s: %w", ev.Name, w.Key(), err)
	}
	ev.Announced = true
	return nil
}
