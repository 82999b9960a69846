package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Quota requests (api.QuotaRequest) are keys of the quota bucket, which
// this service alone writes. Rejecting one is a single compare-and-set of
// its key. Approving one changes two keys, the request and its project's
// ledger, in the order of a reservation's transaction so that a crash at
// any step leaves something any replica finishes:
//
//  1. Intent: the request goes from pending to approving (compare-and-set:
//     a concurrent reject or approve loses, 409), with its reviewer.
//  2. Decision: the ledger gets the requested limits and the request's ID
//     in api.Ledger.Grants, in one compare-and-set; an ID already there
//     was applied, and is not applied again.
//  3. Finish: the request goes from approving to approved.
//
// A request is therefore never approved with its limits unapplied, nor
// pending with them applied: between steps it is approving, and an
// approve of an approving request (a retry) or the repair sweep, for one
// older than IntentAge, finishes it. Each step's event is published after
// its write with an idempotency key of the write's revision, so a finish
// done twice announces once.

// Quota request events, on the project's event subject
// (atoll.evt.<project>.quotarequest.<id>.<event>).
const (
	EventRequested = "requested"
	EventApproved  = "approved"
	EventRejected  = "rejected"
)

// ErrDecided refuses a decision on a request decided already.
var ErrDecided = errors.New("quota request decided already")

// CreateRequest stores a new pending request and returns it.
func (s *Service) CreateRequest(ctx context.Context, c api.QuotaRequestCreate) (*api.QuotaRequest, error) {
	lim, fe := c.Limit()
	if len(fe) > 0 {
		return nil, fe
	}
	for attempt := 0; ; attempt++ {
		n, err := s.nextRequest(ctx, c.Project)
		if err != nil {
			return nil, err
		}
		req := &api.QuotaRequest{ID: api.QuotaRequestID(c.Project, n), Project: c.Project, Tier: api.Tier(c.Tier), Limit: lim,
			Reason: c.Reason, State: api.QuotaRequestPending, Requester: c.Requester, Created: time.Now().UTC()}
		b, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		rev, err := bus.CompareAndSet(ctx, s.kv, api.QuotaRequestKey(c.Project, n), b, 0)
		if errors.Is(err, bus.ErrConflict) && attempt < 10 {
			continue // another replica took the number
		}
		if err != nil {
			return nil, fmt.Errorf("store quota request %s: %w", req.ID, err)
		}
		s.announce(ctx, req, EventRequested, rev)
		return req, nil
	}
}

// nextRequest is the number after the project's last request.
func (s *Service) nextRequest(ctx context.Context, project string) (uint64, error) {
	var last uint64
	for _, k := range s.requestKeys(ctx, api.QuotaRequestProjectFilter(project)) {
		if n, err := parseUintSuffix(k); err == nil && n > last {
			last = n
		}
	}
	return last + 1, nil
}

func parseUintSuffix(key string) (uint64, error) {
	var n uint64
	_, err := fmt.Sscanf(key[strings.LastIndexByte(key, '.')+1:], "%d", &n)
	return n, err
}

// requestKeys lists the request keys filter matches, from the bucket
// (not the mirror: a request just written is listed).
func (s *Service) requestKeys(ctx context.Context, filter string) []string {
	lister, err := s.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		if !errors.Is(err, jetstream.ErrNoKeysFound) {
			s.log.Warn("list quota requests", "err", err)
		}
		return nil
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys
}

// ListRequests returns the requests of l.Project (every project if
// empty) in state l.State (any if empty), oldest first.
func (s *Service) ListRequests(ctx context.Context, l api.QuotaRequestList) ([]api.QuotaRequest, error) {
	filter := api.QuotaRequestFilter
	if l.Project != "" {
		filter = api.QuotaRequestProjectFilter(l.Project)
	}
	out := []api.QuotaRequest{}
	for _, k := range s.requestKeys(ctx, filter) {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read quota request %s: %w", k, err)
		}
		var r api.QuotaRequest
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return nil, fmt.Errorf("decode quota request %s: %w", k, err)
		}
		if l.State == "" || r.State == l.State {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b api.QuotaRequest) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// readRequest reads request id and its revision.
func (s *Service) readRequest(ctx context.Context, id string) (*api.QuotaRequest, uint64, error) {
	project, n, err := api.ParseQuotaRequestID(id)
	if err != nil {
		return nil, 0, bus.Errorf(api.StatusBadRequest, "Invalid", "%v", err)
	}
	v, rev, err := s.bus.Latest(ctx, bus.BucketQuota, api.QuotaRequestKey(project, n))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, bus.Errorf(api.StatusNotFound, "NotFound", "no quota request %s", id)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read quota request %s: %w", id, err)
	}
	var r api.QuotaRequest
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, 0, fmt.Errorf("decode quota request %s: %w", id, err)
	}
	return &r, rev, nil
}

// writeRequest writes r over revision rev.
func (s *Service) writeRequest(ctx context.Context, r *api.QuotaRequest, rev uint64) (uint64, error) {
	project, n, err := api.ParseQuotaRequestID(r.ID)
	if err != nil {
		return 0, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	return bus.CompareAndSet(ctx, s.kv, api.QuotaRequestKey(project, n), b, rev)
}

// Decide approves or rejects a request and returns it as decided. A
// decision on a request decided already is ErrDecided, except an approve
// of a request being approved, which finishes that approval (whoever
// started it).
func (s *Service) Decide(ctx context.Context, d api.QuotaRequestDecide) (*api.QuotaRequest, error) {
	if !d.Approve && strings.TrimSpace(d.Reason) == "" {
		return nil, api.FieldErrors{{Field: "reason", Code: api.CodeRequired, Reason: "say why the request is rejected"}}
	}
	if len(d.Reason) > api.MaxQuotaReason {
		return nil, api.FieldErrors{{Field: "reason", Code: api.CodeTooLarge, Reason: fmt.Sprintf("at most %d bytes", api.MaxQuotaReason)}}
	}
	for {
		r, rev, err := s.readRequest(ctx, d.ID)
		if err != nil {
			return nil, err
		}
		switch {
		case r.State == api.QuotaRequestApproving && d.Approve:
			return s.finishApproval(ctx, r, rev)
		case r.State != api.QuotaRequestPending:
			return r, fmt.Errorf("quota request %s is %s (by %s): %w", r.ID, r.State, r.Reviewer, ErrDecided)
		}
		r.Reviewer, r.Decided, r.Decision = d.Reviewer, time.Now().UTC(), d.Reason
		r.State = api.QuotaRequestRejected
		if d.Approve {
			r.State = api.QuotaRequestApproving
		}
		rev, err = s.writeRequest(ctx, r, rev)
		if errors.Is(err, bus.ErrConflict) {
			continue // decided meanwhile: read what won
		}
		if err != nil {
			return nil, fmt.Errorf("decide quota request %s: %w", r.ID, err)
		}
		if !d.Approve {
			s.announce(ctx, r, EventRejected, rev)
			return r, nil
		}
		if err := s.step("approve-intent"); err != nil {
			return nil, err
		}
		return s.finishApproval(ctx, r, rev)
	}
}

// finishApproval applies an approving request's limits once (steps 2
// and 3) and returns it approved.
func (s *Service) finishApproval(ctx context.Context, r *api.QuotaRequest, rev uint64) (*api.QuotaRequest, error) {
	lctx, unlock, err := s.lock(ctx, r.Project)
	if err != nil {
		return nil, fmt.Errorf("approve %s: %w", r.ID, err)
	}
	err = s.writeLedger(lctx, r.Project, func(l *api.Ledger) error {
		if slices.Contains(l.Grants, r.ID) {
			return bus.ErrNoChange // applied already
		}
		l.Limits[r.Tier] = l.Limits[r.Tier].Apply(r.Limit)
		l.Grants = append(l.Grants, r.ID)
		if len(l.Grants) > api.GrantRing {
			l.Grants = slices.Clone(l.Grants[len(l.Grants)-api.GrantRing:])
		}
		return nil
	})
	unlock()
	if err != nil && !errors.Is(err, bus.ErrNoChange) {
		return nil, fmt.Errorf("apply quota request %s: %w", r.ID, err)
	}
	if err := s.step("approve-decided"); err != nil {
		return nil, err
	}
	r.State = api.QuotaRequestApproved
	rev, err = s.writeRequest(ctx, r, rev)
	if errors.Is(err, bus.ErrConflict) {
		// Someone else finished it.
		cur, _, rerr := s.readRequest(ctx, r.ID)
		if rerr != nil {
			return nil, rerr
		}
		if cur.State == api.QuotaRequestApproved {
			return cur, nil
		}
		return nil, fmt.Errorf("finish quota request %s: %s: %w", r.ID, cur.State, err)
	}
	if err != nil {
		return nil, fmt.Errorf("finish quota request %s: %w", r.ID, err)
	}
	s.announce(ctx, r, EventApproved, rev)
	return r, nil
}

// announce publishes a request's event on its project's event subject,
// once per write (rev). A lost event is logged: the request's state is
// what the caller reads back.
func (s *Service) announce(ctx context.Context, r *api.QuotaRequest, event string, rev uint64) {
	msg := fmt.Sprintf("%s %s: %s", r.Tier, event, r.Reason)
	if r.Decision != "" {
		msg = fmt.Sprintf("%s %s by %s: %s", r.Tier, event, r.Reviewer, r.Decision)
	}
	b, err := json.Marshal(api.WorkloadEvent{Project: r.Project, Kind: api.KindQuotaRequest, Name: r.ID, Event: event, Time: time.Now().UTC(), Message: msg})
	if err == nil {
		_, err = s.bus.Publish(ctx, bus.EventSubject(r.Project, api.KindQuotaRequest, r.ID, event), bus.MsgID(r.ID+"."+event, rev), b, nil)
	}
	if err != nil {
		s.log.Warn("quota request event not published", "err", err, "request", r.ID, "event", event)
	}
}

// RepairApprovals finishes the approvals left approving for longer than
// age (their approver died between the steps).
func (s *Service) RepairApprovals(ctx context.Context, age time.Duration) error {
	var errs []error
	s.mu.Lock()
	keys := slices.Collect(maps.Keys(s.approving))
	s.mu.Unlock()
	for _, k := range keys {
		e, ok := s.mirror.Get(k)
		if !ok {
			continue
		}
		var r api.QuotaRequest
		if json.Unmarshal(e.Value, &r) != nil || r.State != api.QuotaRequestApproving || time.Since(r.Decided) < age {
			continue
		}
		if _, err := s.finishApproval(ctx, &r, e.Revision); err != nil && !errors.Is(err, bus.ErrConflict) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Service) handleRequestCreate(ctx context.Context, req api.QuotaRequestCreate, _ micro.Request) (*api.QuotaRequest, error) {
	r, err := s.CreateRequest(ctx, req)
	return r, requestError(err)
}

func (s *Service) handleRequestList(ctx context.Context, req api.QuotaRequestList, _ micro.Request) (*api.QuotaRequestItems, error) {
	if req.State != "" && !slices.Contains(api.QuotaRequestStates, req.State) {
		return nil, &bus.Error{Status: api.StatusBadRequest, Body: api.ErrorBody{Code: "Invalid", Message: fmt.Sprintf("unknown state %q", req.State),
			Fields: api.FieldErrors{{Field: "state", Code: api.CodeUnsupported, Reason: "one of pending, approving, approved, rejected"}}}}
	}
	items, err := s.ListRequests(ctx, req)
	if err != nil {
		return nil, err
	}
	return &api.QuotaRequestItems{Items: items}, nil
}

func (s *Service) handleRequestDecide(ctx context.Context, req api.QuotaRequestDecide, _ micro.Request) (*api.QuotaRequest, error) {
	r, err := s.Decide(ctx, req)
	return r, requestError(err)
}

// requestError turns a request's errors into the API's.
func requestError(err error) error {
	var fe api.FieldErrors
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		fields := make([]string, len(fe))
		for i, f := range fe {
			fields[i] = f.Field + ": " + f.Reason
		}
		return &bus.Error{Status: api.StatusUnprocessable, Body: api.ErrorBody{Code: "Invalid", Message: "invalid quota request: " + strings.Join(fields, "; "), Fields: fe}}
	case errors.Is(err, ErrDecided):
		return bus.Errorf(api.StatusConflict, "Conflict", "%v", err)
	}
	return err
}
