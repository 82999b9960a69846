package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
)

// TestReadEventsIsNeverShort reads a workload's events with the list's
// consumer against the stream position the leader would name. A consumer
// on a replica that lags the leader holds a prefix of the stream: given a
// position past what its server holds, the old list answered what it had
// as if complete; readEvents waits for the rest, and refuses when it does
// not come.
func TestReadEventsIsNeverShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: "events-test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	filter := bus.EventSubject("p", "App", "web", "*")
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
	var last, next uint64 // the workload's last position; the stream's next
	for _, e := range []string{api.EventAdmitted, api.EventScheduled, api.EventPropagated} {
		last = publish("p", "web", e)
		next = publish("p", "other", e) + 1
	}
	names := func(items []computeapi.Event) []string {
		var out []string
		for _, e := range items {
			out = append(out, e.Event)
		}
		return out
	}
	read := func(t *testing.T, after int64, limit int, through uint64, wait time.Duration) ([]computeapi.Event, error) {
		t.Helper()
		cons, err := b.JS.CreateConsumer(ctx, bus.StreamEvents, listConsumer(filter, after))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.JS.DeleteConsumer(ctx, bus.StreamEvents, cons.CachedInfo().Name) }()
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		return readEvents(ctx, cons, limit, through)
	}

	tests := []struct {
		name    string
		after   int64
		limit   int
		through uint64 // the leader's last position for the workload
		want    []string
	}{
		{name: "every event through the leader's last", limit: maxEventPage, through: last,
			want: []string{api.EventAdmitted, api.EventScheduled, api.EventPropagated}},
		{name: "a full page is complete", limit: 2, through: last,
			want: []string{api.EventAdmitted, api.EventScheduled}},
		{name: "after the first", after: 2, limit: maxEventPage, through: last,
			want: []string{api.EventScheduled, api.EventPropagated}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := read(t, tt.after, tt.limit, tt.through, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("the leader holds one more: refused, not short", func(t *testing.T) {
		start := time.Now()
		got, err := read(t, 0, maxEventPage, next, 300*time.Millisecond)
		if !errors.Is(err, errEventsBehind) {
			t.Fatalf("read through %d with %d held: got %v, %v; want errEventsBehind", next, last, names(got), err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("refused after %v, want about the 300ms wait", d)
		}
	})

	t.Run("the server catches up within the wait: complete", func(t *testing.T) {
		caughtUp := make(chan uint64, 1)
		go func() {
			time.Sleep(200 * time.Millisecond) // the replica's catching up is the subject
			caughtUp <- publish("p", "web", api.EventRunning)
		}()
		got, err := read(t, 0, maxEventPage, next, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if seq := <-caughtUp; seq != next {
			t.Fatalf("the event came at %d, want %d", seq, next)
		}
		want := []string{api.EventAdmitted, api.EventScheduled, api.EventPropagated, api.EventRunning}
		if diff := cmp.Diff(want, names(got)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
}
