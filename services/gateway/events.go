package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
)

// keepAlive is how often an idle event stream gets an SSE comment, so
// proxies keep it open and a dead client is noticed.
const keepAlive = 15 * time.Second

// WorkloadEvents lists a workload's retained events, or watches them as
// Server-Sent Events whose ids are positions in the region's event stream:
// a client that reconnects with Last-Event-ID gets every later event once.
// A list is complete or refused: 200 only with every event up to the last
// one the events stream's leader holds for the workload (or a full page),
// 503 with Retry-After when they cannot all be read yet.
func (s *Service) WorkloadEvents(w http.ResponseWriter, r *http.Request, project, kind, name string, params computeapi.WorkloadEventsParams) {
	if !allow(w, r, project, auth.RoleViewer, true) {
		return
	}
	key, registered, ok := ref(project, kind, name)
	if !ok {
		writeError(w, r, http.StatusNotFound, "NotFound", "not found")
		return
	}
	after := params.After
	if params.LastEventID != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(params.LastEventID), 10, 64)
		if err != nil || n < 0 {
			writeError(w, r, http.StatusBadRequest, "Invalid", "Last-Event-ID must be an event id (a non-negative integer)")
			return
		}
		after = max(after, n)
	}
	watch := params.Watch || strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	_, exists, ok := s.cached(w, r, key)
	if !ok {
		return
	}
	if !watch {
		limit := params.Limit
		if limit <= 0 || limit > maxEventPage {
			limit = maxEventPage
		}
		items, err := s.listEvents(r.Context(), project, registered, name, after, limit)
		if err != nil {
			s.log.Warn("events list refused", "project", project, "kind", registered, "name", name, "after", after, "err", err)
			w.Header().Set("Retry-After", "1")
			writeError(w, r, http.StatusServiceUnavailable, "Unavailable", "the workload's events cannot all be read yet; retry after 1s")
			return
		}
		if !exists && len(items) == 0 && after == 0 {
			writeError(w, r, http.StatusNotFound, "NotFound", "not found")
			return
		}
		writeJSON(w, http.StatusOK, computeapi.EventList{Items: items})
		return
	}
	if !exists && after == 0 {
		writeError(w, r, http.StatusNotFound, "NotFound", "not found")
		return
	}
	cons, err := s.eventConsumer(r.Context(), project, registered, name, after)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	// A stream takes at most 1,000 consumers (nats-server's default): give this one back.
	defer func() {
		_ = s.js.DeleteConsumer(context.WithoutCancel(r.Context()), bus.StreamEvents, cons.CachedInfo().Name)
	}()
	s.streamEvents(w, r, cons)
}

// eventConsumer opens an ordered consumer of one workload's events after
// stream position after (0: from the first retained).
func (s *Service) eventConsumer(ctx context.Context, project, kind, name string, after int64) (jetstream.Consumer, error) {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventSubject(project, kind, name, "*")},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if after > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = uint64(after) + 1
	}
	c, err := s.js.OrderedConsumer(ctx, bus.StreamEvents, cfg)
	if err != nil {
		return nil, fmt.Errorf("open event consumer: %w", err)
	}
	return c, nil
}

// cloudEventIDHeader is the header of an event's CloudEvents id (libs/events
// CloudEventHeader), given in the API beside the stream position.
const cloudEventIDHeader = "ce-id"

func eventView(m jetstream.Msg) (computeapi.Event, bool) {
	meta, err := m.Metadata()
	if err != nil {
		return computeapi.Event{}, false
	}
	var e api.WorkloadEvent
	if json.Unmarshal(m.Data(), &e) != nil {
		return computeapi.Event{}, false
	}
	return computeapi.Event{Id: int64(meta.Sequence.Stream), CloudEventId: m.Headers().Get(cloudEventIDHeader), Project: e.Project, Kind: e.Kind, Name: e.Name,
		Event: e.Event, Generation: e.Generation, Time: e.Time, Message: e.Message}, true
}

// maxEventPage caps an events list; the next page starts after its last id.
const maxEventPage = 1000

// eventListWait bounds a list: the events stream's leader may be moving
// (an election, a server restarting) or slow to answer on a busy region;
// within this time the list asks again, past it the list is refused (503)
// rather than answered short.
const eventListWait = 10 * time.Second

// listEvents reads up to limit of a workload's events after stream
// position after, and only ever all of them (or a full page): every
// event comes from the events stream's leader (STREAM.MSG.GET with
// next_by_subj, which only the leader answers, never a replica that may
// lag it), one after the other, until the leader has none after the last.
// No consumer is made, so a list never waits on the meta leader placing
// one. A leader that cannot answer for a moment is asked again, within
// eventListWait; then the list fails.
func (s *Service) listEvents(ctx context.Context, project, kind, name string, after int64, limit int) ([]computeapi.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, eventListWait)
	defer cancel()
	filter := bus.EventSubject(project, kind, name, "*")
	items := []computeapi.Event{}
	next := uint64(after) + 1
	for len(items) < limit {
		m, err := s.nextEvent(ctx, filter, next)
		if err != nil {
			return nil, err
		}
		if m == nil {
			break // the leader holds nothing more on filter
		}
		next = m.Sequence + 1
		var e api.WorkloadEvent
		if json.Unmarshal(m.Data, &e) != nil {
			continue
		}
		items = append(items, computeapi.Event{Id: int64(m.Sequence), CloudEventId: m.header(cloudEventIDHeader), Project: e.Project, Kind: e.Kind, Name: e.Name,
			Event: e.Event, Generation: e.Generation, Time: e.Time, Message: e.Message})
	}
	return items, nil
}

// storedEvent is a message of the events stream as its leader returns it.
type storedEvent struct {
	Sequence uint64 `json:"seq"`
	Data     []byte `json:"data"`
	Headers  []byte `json:"hdrs"` // "NATS/1.0\r\n" and MIME headers
}

// header returns one of the stored event's headers ("" when none).
func (e *storedEvent) header(name string) string {
	if len(e.Headers) == 0 {
		return ""
	}
	r := textproto.NewReader(bufio.NewReader(bytes.NewReader(e.Headers)))
	if _, err := r.ReadLine(); err != nil { // NATS/1.0
		return ""
	}
	h, _ := r.ReadMIMEHeader()
	return h.Get(name)
}

// nextEvent is the first event on filter at stream position from or
// later, as the events stream's leader holds it (nil: none). A leader
// that cannot answer for now (an election, no server answering yet) is
// asked again until ctx ends.
func (s *Service) nextEvent(ctx context.Context, filter string, from uint64) (*storedEvent, error) {
	req, err := json.Marshal(struct {
		Seq  uint64 `json:"seq"`
		Next string `json:"next_by_subj"`
	}{from, filter})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	for attempt := 1; ; attempt++ {
		m, err := s.askEventsLeader(ctx, req)
		if err == nil || !transientEventError(err) || ctx.Err() != nil {
			if err != nil {
				err = fmt.Errorf("read events from %d (attempt %d): %w", from, attempt, err)
			}
			return m, err
		}
		wait := time.NewTimer(min(time.Duration(attempt)*50*time.Millisecond, 500*time.Millisecond))
		select {
		case <-ctx.Done():
		case <-wait.C:
		}
		wait.Stop()
	}
}

// askEventsLeader sends one STREAM.MSG.GET to the events stream's leader.
func (s *Service) askEventsLeader(ctx context.Context, req []byte) (*storedEvent, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := s.bus.NC.RequestWithContext(rctx, jetstream.DefaultAPIPrefix+"STREAM.MSG.GET."+bus.StreamEvents, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *storedEvent        `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, err
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, nil
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, errors.New("the stream leader's answer holds no message")
	}
	return resp.Message, nil
}

// jsErrCodeUnavailable is JetStream's "system temporarily unavailable"
// (10008): the stream has no leader for the moment.
const jsErrCodeUnavailable jetstream.ErrorCode = 10008

// transientEventError says whether asking the events stream's leader
// again may succeed: it had none for a moment, or no server answered in
// time.
func transientEventError(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr):
		return apiErr.ErrorCode == jsErrCodeUnavailable || apiErr.Code == http.StatusServiceUnavailable
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	return false
}

// streamEvents writes events as they come until the client goes away.
func (s *Service) streamEvents(w http.ResponseWriter, r *http.Request, cons jetstream.Consumer) {
	release, ok := s.streamSlot(w, r)
	if !ok {
		return
	}
	defer release()
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, r, http.StatusInternalServerError, "Internal", "streaming unsupported")
		return
	}
	msgs := make(chan jetstream.Msg, 64)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-r.Context().Done():
		}
	})
	if err != nil {
		writeRemoteError(w, r, fmt.Errorf("watch events: %w", err))
		return
	}
	defer cc.Stop()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: 2000\n\n")
	flusher.Flush()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.streamsCtx.Done():
			return
		case <-tick.C:
			if _, err := fmt.Fprintf(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case m := <-msgs:
			e, ok := eventView(m)
			if !ok {
				continue
			}
			b, _ := json.Marshal(e)
			if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Id, b); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}
