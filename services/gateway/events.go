package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
	_, exists := s.cache.Get(key)
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

func eventView(m jetstream.Msg) (computeapi.Event, bool) {
	meta, err := m.Metadata()
	if err != nil {
		return computeapi.Event{}, false
	}
	var e api.WorkloadEvent
	if json.Unmarshal(m.Data(), &e) != nil {
		return computeapi.Event{}, false
	}
	return computeapi.Event{Id: int64(meta.Sequence.Stream), Project: e.Project, Kind: e.Kind, Name: e.Name,
		Event: e.Event, Generation: e.Generation, Time: e.Time, Message: e.Message}, true
}

// maxEventPage caps an events list; the next page starts after its last id.
const maxEventPage = 1000

// eventListWait bounds the steps of a list that involve the events
// stream's servers: asking the stream's leader, and waiting for the
// consumer's server to hold every event the leader has; past it the list
// is refused (503) rather than answered short.
const eventListWait = 4 * time.Second

// eventConsumerWait bounds opening a list's consumer: in a cluster the
// meta leader places it through its own Raft log, the slowest step of a
// list on a busy region.
const eventConsumerWait = 8 * time.Second

// errEventsBehind is a list whose consumer did not reach the stream
// leader's last event for the workload in time: its server lags the
// leader (restarting, or catching up after a partition).
var errEventsBehind = errors.New("the consumer's server holds fewer events than the stream's leader")

// listEvents reads up to limit of a workload's events after stream
// position after, and only ever all of them: it first asks the events
// stream's leader for the position of the workload's last event, then
// reads one consumer until it has delivered that position (or limit
// events, a full page). A consumer on a replica that lags the leader
// waits for it to catch up, within eventListWait, then errEventsBehind.
func (s *Service) listEvents(ctx context.Context, project, kind, name string, after int64, limit int) ([]computeapi.Event, error) {
	filter := bus.EventSubject(project, kind, name, "*")
	lctx, cancel := context.WithTimeout(ctx, eventListWait)
	through, err := s.lastEventSeq(lctx, filter)
	cancel()
	if err != nil {
		return nil, err
	}
	if through <= uint64(after) {
		return []computeapi.Event{}, nil // nothing after it, by the leader's word
	}
	// One consumer, read with as many pulls as it takes: an ordered
	// consumer is recreated on every Fetch, perhaps on another server.
	cctx, cancel := context.WithTimeout(ctx, eventConsumerWait)
	cons, err := s.js.CreateConsumer(cctx, bus.StreamEvents, listConsumer(filter, after))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("open event consumer: %w", err)
	}
	// A stream takes at most 1,000 consumers (nats-server's default): give this one back.
	defer func() {
		_ = s.js.DeleteConsumer(context.WithoutCancel(ctx), bus.StreamEvents, cons.CachedInfo().Name)
	}()
	rctx, cancel := context.WithTimeout(ctx, eventListWait)
	defer cancel()
	return readEvents(rctx, cons, limit, through)
}

// listConsumer configures the consumer of one list: the events on filter
// after stream position after, not acknowledged, on one server.
func listConsumer(filter string, after int64) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		FilterSubjects:    []string{filter},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute, // gone even if the list's delete is lost
	}
	if after > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = uint64(after) + 1
	}
	return cfg
}

// lastEventSeq is the stream position of the last retained event on
// filter (0: none), as the events stream's leader holds it. The request
// goes to STREAM.MSG.GET, which only the stream's leader answers, never to
// a direct get, which any replica may answer from behind.
func (s *Service) lastEventSeq(ctx context.Context, filter string) (uint64, error) {
	req, err := json.Marshal(struct {
		LastFor   string `json:"last_by_subj"`
		NoHeaders bool   `json:"no_hdr"`
	}{filter, true})
	if err != nil {
		return 0, fmt.Errorf("last event: %w", err)
	}
	m, err := s.bus.NC.RequestWithContext(ctx, jetstream.DefaultAPIPrefix+"STREAM.MSG.GET."+bus.StreamEvents, req)
	if err != nil {
		return 0, fmt.Errorf("last event: ask the stream leader: %w", err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Sequence uint64 `json:"seq"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return 0, fmt.Errorf("last event: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return 0, nil
	case resp.Error != nil:
		return 0, fmt.Errorf("last event: %w", resp.Error)
	case resp.Message == nil:
		return 0, errors.New("last event: the stream leader's answer holds no message")
	}
	return resp.Message.Sequence, nil
}

// readEvents reads cons until it has delivered stream position through,
// or limit events (a full page: the next starts after its last id). What
// cons delivers is a prefix of the stream on its server; when that
// server has nothing more but through is not reached yet, it lags the
// leader, and readEvents waits for the rest until ctx's deadline, then
// gives up with errEventsBehind: never a short list that looks complete.
func readEvents(ctx context.Context, cons jetstream.Consumer, limit int, through uint64) ([]computeapi.Event, error) {
	items := []computeapi.Event{}
	pending := cons.CachedInfo().NumPending // what its server holds for it now
	var last uint64                         // the stream position last delivered
	noResponders := 0                       // pulls no server answered
	deadline, bounded := ctx.Deadline()
	for last < through && len(items) < limit {
		if ctx.Err() != nil || bounded && time.Until(deadline) < 10*time.Millisecond {
			return nil, fmt.Errorf("read events through %d, reached %d: %w", through, last, errEventsBehind)
		}
		// As many as its server holds (they come at once), or one more
		// when it holds none yet (it comes when the server catches up).
		n := min(max(pending, 1), uint64(limit-len(items)))
		batch, err := cons.Fetch(int(n), jetstream.FetchContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("read events: %w", err)
			}
			last, pending = meta.Sequence.Stream, meta.NumPending
			if e, ok := eventView(m); ok {
				items = append(items, e)
			}
		}
		err = batch.Error()
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, nats.ErrNoResponders):
			// The consumer was created, but its server's interest in
			// pulls has not reached the server this connection is on
			// yet (a cluster's interest spreads over its routes a moment
			// later): pull again shortly.
			noResponders++
			wait := time.NewTimer(min(time.Duration(noResponders)*20*time.Millisecond, 200*time.Millisecond))
			select {
			case <-ctx.Done():
			case <-wait.C:
			}
			wait.Stop()
		default:
			return nil, fmt.Errorf("read events: %w", err)
		}
	}
	return items, nil
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
