package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
)

// TestListEventsFromTheLeader lists a workload's events, interleaved in
// the stream with another's, the way a list does: every event from the
// stream's leader, one after the other, until it has none after the last.
func TestListEventsFromTheLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: "events-test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	s := &Service{bus: b}
	publish := func(project, name, event string) uint64 {
		t.Helper()
		data, _ := json.Marshal(api.WorkloadEvent{Project: project, Kind: "App", Name: name, Event: event, Generation: 1, Time: time.Now().UTC()})
		ack, err := b.JS.Publish(ctx, bus.EventSubject(project, "App", name, event), data)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	// The workload's events, with another's in between.
	var seqs []uint64
	for _, e := range []string{api.EventAdmitted, api.EventScheduled, api.EventPropagated} {
		seqs = append(seqs, publish("p", "web", e))
		publish("p", "other", e)
	}
	names := func(items []computeapi.Event) []string {
		var out []string
		for _, e := range items {
			out = append(out, e.Event)
		}
		return out
	}
	tests := []struct {
		name  string
		after int64
		limit int
		want  []string
	}{
		{name: "every event", limit: maxEventPage, want: []string{api.EventAdmitted, api.EventScheduled, api.EventPropagated}},
		{name: "a full page", limit: 2, want: []string{api.EventAdmitted, api.EventScheduled}},
		{name: "after the first", after: int64(seqs[0]), limit: maxEventPage, want: []string{api.EventScheduled, api.EventPropagated}},
		{name: "after the last", after: int64(seqs[2]), limit: maxEventPage, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.listEvents(ctx, "p", "App", "web", tt.after, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			for i, e := range got {
				if i > 0 && e.Id <= got[i-1].Id {
					t.Errorf("ids out of order: %d after %d", e.Id, got[i-1].Id)
				}
			}
		})
	}
	t.Run("no stream: an error, not an empty list", func(t *testing.T) {
		if err := b.JS.DeleteStream(ctx, bus.StreamEvents); err != nil {
			t.Fatal(err)
		}
		if got, err := s.listEvents(ctx, "p", "App", "web", 0, maxEventPage); err == nil {
			t.Fatalf("listed %v from a missing stream, want an error", names(got))
		}
	})
}

func TestTransientEventError(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: jsErrCodeUnavailable, Description: "JetStream system temporarily unavailable"}, true},
		{fmt.Errorf("ask: %w", nats.ErrNoResponders), true},
		{nats.ErrTimeout, true},
		{context.DeadlineExceeded, true},
		{&jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"}, false},
		{errors.New("unexpected end of JSON input"), false},
	}
	for _, tt := range tests {
		if got := transientEventError(tt.err); got != tt.want {
			t.Errorf("transientEventError(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
