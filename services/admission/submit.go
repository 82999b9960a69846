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
	"atoll.dev/libs/events"
)

// Error is an admission failure as data: an HTTP-like status and a body.
type Error struct {
	Status int
	Body   api.ErrorBody
}

func (e *Error) Error() string { return e.Body.Message }

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
	fe := api.Validate(w)
	fe = append(fe, checkPolicy(w, p)...)
	if len(fe) > 0 {
		return nil, invalid(fe)
	}
	s.mutate(w)
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
	key := w.Key()
	if cur, _, err := s.get(ctx, key); err == nil {
		if sameSpec(cur, w) {
			return cur, nil
		}
		return nil, &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "AlreadyExists", Message: fmt.Sprintf("%s already exists with a different spec; update it instead", w)}}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, unavailable(err)
	}
	if err := s.reserve(ctx, w); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	w.Metadata.Generation, w.Metadata.UID, w.Metadata.Created, w.Metadata.Updated = 1, newUID(), now, now
	b, err := json.Marshal(w)
	if err != nil {
		return nil, unavailable(err)
	}
	rev, err := bus.CompareAndSet(ctx, s.workloads, key, b, 0)
	if errors.Is(err, bus.ErrConflict) {
		// A concurrent submit of the same name won; report like a retry would.
		if cur, _, gerr := s.get(ctx, key); gerr == nil && sameSpec(cur, w) {
			return cur, nil
		}
		return nil, &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "AlreadyExists", Message: fmt.Sprintf("%s already exists", w)}}
	}
	if err != nil {
		s.release(ctx, w)
		return nil, unavailable(err)
	}
	s.emit(ctx, w, api.EventAdmitted, rev)
	return w, nil
}

// Update replaces an existing workload's spec and labels.
func (s *Service) Update(ctx context.Context, doc []byte, p Principal) (*api.Workload, error) {
	w, aerr := s.prepare(doc, p)
	if aerr != nil {
		return nil, aerr
	}
	key := w.Key()
	for attempt := 0; attempt < 8; attempt++ {
		cur, rev, err := s.get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, &Error{Status: api.StatusNotFound, Body: api.ErrorBody{Code: "NotFound", Message: fmt.Sprintf("%s not found", w)}}
		}
		if err != nil {
			return nil, unavailable(err)
		}
		next := *w
		next.Control = carryControl(cur, w)
		if sameSpec(cur, &next) && sameControl(cur, &next) {
			return cur, nil
		}
		if err := s.reserve(ctx, &next); err != nil {
			return nil, err
		}
		next.Metadata.Generation = cur.Metadata.Generation + 1
		next.Metadata.UID, next.Metadata.Created, next.Metadata.Updated = cur.Metadata.UID, cur.Metadata.Created, time.Now().UTC()
		b, err := json.Marshal(&next)
		if err != nil {
			return nil, unavailable(err)
		}
		nrev, err := bus.CompareAndSet(ctx, s.workloads, key, b, rev)
		if errors.Is(err, bus.ErrConflict) {
			continue // another update won; re-read and re-reserve
		}
		if err != nil {
			return nil, unavailable(err)
		}
		s.emit(ctx, &next, api.EventUpdated, nrev)
		return &next, nil
	}
	return nil, &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "Conflict", Message: fmt.Sprintf("%s is being changed concurrently; retry", w)}}
}

// Delete removes a workload and returns its quota. Deleting what does not
// exist is NotFound.
func (s *Service) Delete(ctx context.Context, project, kind, name string) error {
	key := api.Key(project, kind, name)
	cur, rev, err := s.get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &Error{Status: api.StatusNotFound, Body: api.ErrorBody{Code: "NotFound", Message: fmt.Sprintf("%s/%s/%s not found", project, kind, name)}}
	}
	if err != nil {
		return unavailable(err)
	}
	if err := s.workloads.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "Conflict", Message: "changed concurrently; retry"}}
		}
		return unavailable(err)
	}
	s.release(ctx, cur)
	s.emit(ctx, cur, api.EventDeleted, rev+1)
	return nil
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
	ja, err1 := json.Marshal(a.Spec)
	jb, err2 := json.Marshal(b.Spec)
	la, _ := json.Marshal(a.Metadata.Labels)
	lb, _ := json.Marshal(b.Metadata.Labels)
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
	req, _ := json.Marshal(api.QuotaReserve{Project: w.Metadata.Project, Key: w.Key(), Demand: demand(w)})
	_, err := s.quota.Request(ctx, "quota", bus.RequestSubject("quota", "reserve"), req)
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
	req, _ := json.Marshal(api.QuotaRelease{Project: w.Metadata.Project, Key: w.Key()})
	if _, err := s.quota.Request(ctx, "quota", bus.RequestSubject("quota", "release"), req); err != nil {
		// The quota service's orphan sweep returns it later.
		s.log.Warn("quota release", "key", w.Key(), "err", err)
	}
}

func (s *Service) emit(ctx context.Context, w *api.Workload, event string, rev uint64) {
	s.emitMessage(ctx, w, event, "", rev)
}

func (s *Service) emitMessage(ctx context.Context, w *api.Workload, event, message string, rev uint64) {
	if err := events.Publish(ctx, s.bus, w, event, message, rev); err != nil {
		s.log.Warn("publish event", "key", w.Key(), "event", event, "err", err)
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

func (s *Service) reply(r micro.Request, v any, err error) {
	var ae *Error
	switch {
	case errors.As(err, &ae):
		_ = bus.RespondError(r, ae.Status, ae.Body.Message, ae.Body)
	case err != nil:
		_ = bus.RespondError(r, api.StatusInternal, err.Error(), api.ErrorBody{Code: "Internal", Message: err.Error()})
	default:
		_ = bus.RespondJSON(r, v)
	}
}

func (s *Service) handleSubmit(r micro.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	w, err := s.Submit(ctx, r.Data(), principal(r))
	s.reply(r, w, err)
}

func (s *Service) handleUpdate(r micro.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	w, err := s.Update(ctx, r.Data(), principal(r))
	s.reply(r, w, err)
}

func (s *Service) handleDelete(r micro.Request) {
	var req api.WorkloadRef
	if err := json.Unmarshal(r.Data(), &req); err != nil {
		s.reply(r, nil, &Error{Status: api.StatusBadRequest, Body: api.ErrorBody{Code: "BadRequest", Message: err.Error()}})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err := s.Delete(ctx, req.Project, req.Kind, req.Name)
	s.reply(r, map[string]bool{"deleted": true}, err)
}
