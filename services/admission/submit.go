package admission

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Error is an admission failure as data: an HTTP-like status and a body,
// which the endpoints answer as they are (bus.Error).
type Error = bus.Error

func invalid(fe api.FieldErrors) *Error {
	status, code := api.StatusUnprocessable, "Invalid"
	for _, f := range fe {
		if f.Code == api.CodeForbidden {
			status, code = api.StatusForbidden, "Forbidden"
			break
		}
	}
	return &Error{Status: status, Body: api.ErrorBody{Code: code, Message: fe.Error(), Fields: fe}}
}

// prepare decodes, defaults, validates, checks policy and mutates a
// workload document. Nothing is written.
func (s *Service) prepare(doc []byte, p Principal) (*api.Workload, *Error) {
	w, err := api.Decode(doc)
	if err != nil {
		var fe api.FieldErrors
		if errors.As(err, &fe) {
			return nil, invalid(fe)
		}
		return nil, &Error{Status: api.StatusBadRequest, Body: api.ErrorBody{Code: "BadRequest", Message: err.Error()}}
	}
	w.Spec.Default()
	fe := api.ValidateWith(w, s.limits)
	fe = append(fe, checkPolicy(w, p)...)
	if len(fe) > 0 {
		return nil, invalid(fe)
	}
	s.mutate(w)
	if aerr := s.sealSecret(w, p); aerr != nil {
		return nil, aerr
	}
	if aerr := s.checkStoredSize(w); aerr != nil {
		return nil, aerr
	}
	return w, nil
}

// Submit admits a new workload. Submitting the same document again returns
// the stored workload (a retried submit is not an error); a different
// document under an existing name is a conflict.
func (s *Service) Submit(ctx context.Context, doc []byte, p Principal) (*api.Workload, error) {
	w, aerr := s.prepare(doc, p)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := s.resolveConfigs(ctx, w); aerr != nil { // configuse.go
		return nil, aerr
	}
	key := w.Key()
	hc, err := s.claimHost(ctx, w) // hosts.go
	if err != nil {
		return nil, err
	}
	res := s.reservation(w)
	var out *api.Workload
	rev, err := bus.Update(ctx, s.workloads, key, func(cur []byte, exists bool) ([]byte, error) {
		if exists {
			stored, err := api.Decode(cur)
			if err != nil {
				return nil, unavailable(fmt.Errorf("decode stored %s: %w", key, err))
			}
			if !sameSpec(stored, w) {
				return nil, &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "AlreadyExists", Message: fmt.Sprintf("%s already exists with a different spec; update it instead", w)}}
			}
			out = stored
			return nil, bus.ErrNoChange
		}
		if err := res.hold(ctx, nil, w); err != nil {
			return nil, err
		}
		if err := hc.ready(); err != nil {
			return nil, err
		}
		s.beforeWrite(ctx, key)
		secretVersion(nil, w)
		now := time.Now().UTC()
		w.Metadata.Generation, w.Metadata.UID, w.Metadata.Created, w.Metadata.Updated = 1, newUID(), now, now
		w.Metadata.Event, w.Metadata.EventMessage = api.EventAdmitted, ""
		out = w
		return json.Marshal(w)
	})
	if err != nil {
		hc.undo(ctx, s)
	}
	return s.settleConfig(ctx, res, out, rev, err, w)
}

// settle ends a write of admission's: one that failed, or was not needed,
// gives the quota back to what the stored workload holds; one that landed
// is announced.
func (s *Service) settle(ctx context.Context, res *reservation, out *api.Workload, rev uint64, err error, what string) (*api.Workload, error) {
	if err != nil {
		res.restore(ctx)
		if errors.Is(err, bus.ErrNoChange) {
			return out, nil
		}
		return nil, writeError(err, what)
	}
	s.publish(ctx, out, rev)
	return out, nil
}

// Update replaces an existing workload's spec and labels.
func (s *Service) Update(ctx context.Context, doc []byte, p Principal) (*api.Workload, error) {
	w, aerr := s.prepare(doc, p)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := s.resolveConfigs(ctx, w); aerr != nil { // configuse.go
		return nil, aerr
	}
	key := w.Key()
	hc, err := s.claimHost(ctx, w) // hosts.go
	if err != nil {
		return nil, err
	}
	res := s.reservation(w)
	var out *api.Workload
	oldHost := "" // the stored App's host, released once the change is written
	rev, err := bus.Update(ctx, s.workloads, key, func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, &Error{Status: api.StatusNotFound, Body: api.ErrorBody{Code: "NotFound", Message: fmt.Sprintf("%s not found", w)}}
		}
		stored, err := api.Decode(cur)
		if err != nil {
			return nil, unavailable(fmt.Errorf("decode stored %s: %w", key, err))
		}
		oldHost = api.HostOf(stored)
		next := *w
		next.Control = carryControl(stored, w)
		next.Spec = cloneSecret(w.Spec)
		secretVersion(stored, &next)
		if sameSpec(stored, &next) && sameControl(stored, &next) {
			out = stored
			return nil, bus.ErrNoChange
		}
		if err := res.hold(ctx, stored, &next); err != nil {
			return nil, err
		}
		if err := hc.ready(); err != nil {
			return nil, err
		}
		s.beforeWrite(ctx, key)
		next.Metadata.Generation = stored.Metadata.Generation + 1
		next.Metadata.UID, next.Metadata.Created, next.Metadata.Updated = stored.Metadata.UID, stored.Metadata.Created, time.Now().UTC()
		next.Metadata.Event, next.Metadata.EventMessage = api.EventUpdated, ""
		out = &next
		return json.Marshal(&next)
	})
	switch {
	case err != nil && !errors.Is(err, bus.ErrNoChange):
		hc.undo(ctx, s)
	case err == nil && oldHost != api.HostOf(w):
		s.releaseHost(ctx, w.Metadata.Project, w.Metadata.Name, oldHost)
	}
	return s.settleConfig(ctx, res, out, rev, err, w)
}

// settleConfig is settle, and then, for a Config or Secret written, the
// rollout of the Apps that name it (configuse.go).
func (s *Service) settleConfig(ctx context.Context, res *reservation, out *api.Workload, rev uint64, err error, w *api.Workload) (*api.Workload, error) {
	out, err = s.settle(ctx, res, out, rev, err, w.String())
	if err == nil && !s.hooks.crashed.Load() {
		s.afterConfigWrite(ctx, w.Metadata.Project, w.Kind, w.Metadata.Name)
	}
	return out, err
}

// Delete removes a workload and returns its quota. Deleting what does not
// exist is NotFound.
func (s *Service) Delete(ctx context.Context, project, kind, name string) error {
	return s.DeleteRef(ctx, api.WorkloadRef{Project: project, Kind: kind, Name: name})
}

// DeleteRef is Delete with the request's options: a Config or Secret that
// a workload names is deleted only with Force (configuse.go).
func (s *Service) DeleteRef(ctx context.Context, ref api.WorkloadRef) error {
	project, kind, name := ref.Project, ref.Kind, ref.Name
	if (kind == api.KindConfig || kind == api.KindSecret) && !ref.Force {
		if err := s.checkUnused(ctx, project, api.ConfigRef{Kind: kind, Name: name}); err != nil {
			return err
		}
	}
	key := api.Key(project, kind, name)
	cur, rev, err := s.get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &Error{Status: api.StatusNotFound, Body: api.ErrorBody{Code: "NotFound", Message: fmt.Sprintf("%s/%s/%s not found", project, kind, name)}}
	}
	if err != nil {
		return unavailable(err)
	}
	// One compare-and-set, not a loop: a workload changed meanwhile is
	// the caller's to look at again.
	drev, err := bus.CompareAndDelete(ctx, s.bus.JS, s.workloads, key, rev)
	if errors.Is(err, bus.ErrConflict) {
		return &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "Conflict", Message: "changed concurrently; retry"}}
	}
	if err != nil {
		return unavailable(err)
	}
	s.release(ctx, cur)
	s.releaseHost(ctx, project, name, api.HostOf(cur)) // hosts.go
	cur.Metadata.Event, cur.Metadata.EventMessage = api.EventDeleted, ""
	s.publish(ctx, cur, drev)
	return nil
}

// writeError is what a caller is told about a write that did not happen.
func writeError(err error, what string) error {
	var ae *Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, bus.ErrConflict):
		return &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "Conflict", Message: fmt.Sprintf("%s is being changed concurrently; retry", what)}}
	default:
		return unavailable(err)
	}
}

// beforeWrite runs the test hook of that name, if any.
func (s *Service) beforeWrite(ctx context.Context, key string) {
	if f := s.hooks.beforeWrite; f != nil {
		f(ctx, key)
	}
}

// publish announces the event w records as opening its generation (or
// its deletion), written at rev. The write is committed: a failure here
// is logged, not returned, and the repair loop publishes the event.
func (s *Service) publish(ctx context.Context, w *api.Workload, rev uint64) {
	if s.hooks.crashed.Load() {
		return
	}
	if err := s.events.Publish(ctx, w, w.Metadata.Event, w.Metadata.EventMessage, rev); err != nil {
		s.log.Warn("publish event, the repair loop will", "key", w.Key(), "event", w.Metadata.Event, "err", err)
	}
}

// reservation is the quota side of one write: what the write reserved for
// its key, so that a write that does not happen puts back what the stored
// workload demands. Reserving replaces what the key held (it is set, not
// added), so reserving again in a retry is safe.
type reservation struct {
	s       *Service
	project string
	key     string
	// held is what this write reserved last; nil while it has reserved
	// nothing and the quota holds what the stored workload demands.
	held *api.Demand
}

func (s *Service) reservation(w *api.Workload) *reservation {
	return &reservation{s: s, project: w.Metadata.Project, key: w.Key()}
}

// demand is what w holds against its project's quota: nothing while it is
// stopped, its pods' requests otherwise.
func demand(w *api.Workload) api.Demand {
	if w.Control.Stopped {
		tier, _ := w.Spec.Scheduling()
		return api.Demand{Tier: tier}
	}
	return api.DemandOf(w)
}

// hold makes the quota hold what next demands. It skips the reservation
// only when this write has reserved nothing yet and the stored workload
// cur already demands the same; once it has reserved, it reserves again
// in every retry, since the writer that beat it may have reserved
// something else for the key in between.
func (r *reservation) hold(ctx context.Context, cur, next *api.Workload) error {
	want := demand(next)
	if r.held == nil && cur != nil && demand(cur) == want {
		return nil
	}
	if err := r.s.reserve(ctx, next); err != nil {
		return err
	}
	r.held = &want
	return nil
}

// restoreTimeout bounds setting a reservation back; the caller's context
// may have ended, which is often why the write did not happen.
const restoreTimeout = 5 * time.Second

// restore, after a write that did not happen, makes the quota hold what
// the stored workload demands again, or nothing when there is none.
func (r *reservation) restore(ctx context.Context) {
	if r.held == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	defer cancel()
	cur, _, err := r.s.get(ctx, r.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		r.s.releaseKey(ctx, r.project, r.key)
	case err != nil:
		// The workload's next change reserves again; the quota's sweep
		// returns what no workload holds.
		r.s.log.Warn("restore quota reservation: read stored workload", "key", r.key, "err", err)
	case demand(cur) != *r.held:
		r.s.reserveQuietly(ctx, cur)
	}
	r.held = nil
}

func (s *Service) get(ctx context.Context, key string) (*api.Workload, uint64, error) {
	e, err := s.workloads.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	w, err := api.Decode(e.Value())
	if err != nil {
		return nil, 0, fmt.Errorf("decode stored %s: %w", key, err)
	}
	return w, e.Revision(), nil
}

func sameSpec(a, b *api.Workload) bool {
	la, _ := json.Marshal(a.Metadata.Labels)
	lb, _ := json.Marshal(b.Metadata.Labels)
	if same, secret := sameSecretValues(a, b); secret {
		return same && bytes.Equal(la, lb)
	}
	ja, err1 := json.Marshal(a.Spec)
	jb, err2 := json.Marshal(b.Spec)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb) && bytes.Equal(la, lb)
}

// carryControl is the Control an update writes: the document's when it
// sets one (only platform admins may), else the stored one, less the
// restarts of containers the update removes.
func carryControl(cur, doc *api.Workload) api.Control {
	if !doc.Control.IsZero() {
		return doc.Control
	}
	c := cur.Control.Clone()
	for name := range c.ContainerRestarts {
		if !slices.ContainsFunc(doc.Spec.PodTemplate().Containers, func(ct api.Container) bool { return ct.Name == name }) {
			delete(c.ContainerRestarts, name)
		}
	}
	if len(c.ContainerRestarts) == 0 {
		c.ContainerRestarts = nil
	}
	return c
}

func sameControl(a, b *api.Workload) bool {
	ja, err1 := json.Marshal(a.Control)
	jb, err2 := json.Marshal(b.Control)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// reserve holds what w demands (nothing while stopped), replacing what
// its key held.
func (s *Service) reserve(ctx context.Context, w *api.Workload) error {
	err := bus.QuotaReserve.Send(ctx, s.quota, api.QuotaReserve{Project: w.Metadata.Project, Key: w.Key(), Demand: demand(w)})
	var re *bus.RemoteError
	if errors.As(err, &re) && re.Code < 500 {
		var body api.ErrorBody
		if json.Unmarshal(re.Body, &body) != nil {
			body = api.ErrorBody{Code: "QuotaExceeded", Message: re.Description}
		}
		return &Error{Status: re.Code, Body: body}
	}
	if err != nil {
		return &Error{Status: api.StatusUnavailable, Body: api.ErrorBody{Code: "QuotaUnavailable", Message: err.Error()}}
	}
	return nil
}

func (s *Service) release(ctx context.Context, w *api.Workload) {
	s.releaseKey(ctx, w.Metadata.Project, w.Key())
}

func (s *Service) releaseKey(ctx context.Context, project, key string) {
	if err := bus.QuotaRelease.Send(ctx, s.quota, api.QuotaRelease{Project: project, Key: key}); err != nil {
		// The quota service's orphan sweep returns it later.
		s.log.Warn("quota release", "key", key, "err", err)
	}
}

func unavailable(err error) *Error {
	return &Error{Status: api.StatusUnavailable, Body: api.ErrorBody{Code: "Unavailable", Message: err.Error()}}
}

func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func principal(r micro.Request) Principal {
	return Principal{Name: r.Headers().Get(HeaderPrincipal), PlatformAdmin: r.Headers().Get(HeaderPlatformAdmin) == "true"}
}

func (s *Service) submit(ctx context.Context, doc []byte, r micro.Request) (*api.Workload, error) {
	return s.Submit(ctx, doc, principal(r))
}

func (s *Service) update(ctx context.Context, doc []byte, r micro.Request) (*api.Workload, error) {
	return s.Update(ctx, doc, principal(r))
}

func (s *Service) delete(ctx context.Context, req api.WorkloadRef, _ micro.Request) (api.Ack, error) {
	if err := s.DeleteRef(ctx, req); err != nil {
		return nil, err
	}
	return api.Ack{"deleted": true}, nil
}
