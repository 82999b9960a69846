package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

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
	cons, err := s.eventConsumer(r.Context(), project, registered, name, after)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	// A stream takes at most 1,000 consumers (nats-server's default): give this one back.
	defer func() {
		_ = s.js.DeleteConsumer(context.WithoutCancel(r.Context()), bus.StreamEvents, cons.CachedInfo().Name)
	}()
	if !watch {
		limit := params.Limit
		if limit <= 0 || limit > maxEventPage {
			limit = maxEventPage
		}
		items, err := s.pastEvents(r.Context(), cons, limit)
		if err != nil {
			writeRemoteError(w, r, err)
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

// pastEvents reads up to limit events the consumer has now, without
// waiting for more.
func (s *Service) pastEvents(ctx context.Context, cons jetstream.Consumer, limit int) ([]computeapi.Event, error) {
	items := []computeapi.Event{}
	info := cons.CachedInfo()
	pending := info.NumPending
	for pending > 0 && len(items) < limit {
		batch, err := cons.Fetch(int(min(pending, uint64(limit-len(items)))), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, _ := m.Metadata()
			if e, ok := eventView(m); ok {
				items = append(items, e)
			}
			if meta != nil {
				pending = meta.NumPending
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		if n == 0 {
			// The consumer counted pending events it did not deliver (a
			// server of the stream restarting or catching up): an error the
			// client can retry, never a short list that looks complete.
			return nil, fmt.Errorf("read events: %d of %d pending events not delivered in time", pending, info.NumPending)
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
