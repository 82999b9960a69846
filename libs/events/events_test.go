package events_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
)

func workload(gen int64) *api.Workload {
	return &api.Workload{Kind: api.KindApp, Metadata: api.Metadata{Project: "p", Name: "web", Generation: gen}}
}

func openBus(t *testing.T) *bus.Bus {
	t.Helper()
	b, err := bus.Open(context.Background(), bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// stored counts the messages the events stream holds on subj.
func stored(t *testing.T, b *bus.Bus, subj string) uint64 {
	t.Helper()
	s, err := b.JS.Stream(context.Background(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subj]
}

func TestEventsArriveInLifecycleOrder(t *testing.T) {
	ctx := context.Background()
	b := openBus(t)
	p := events.NewPublisher(b, slog.Default(), events.Options{MaxWait: time.Minute})
	// The scheduler is ready before admission has announced the workload.
	done := make(chan error, 1)
	go func() { done <- p.Publish(ctx, workload(1), api.EventScheduled, "", 2) }()
	select {
	case err := <-done:
		t.Fatalf("scheduled went out (%v) before its predecessor", err)
	case <-time.After(100 * time.Millisecond): // the wait under test: nothing may happen in it
	}
	if err := p.Publish(ctx, workload(1), api.EventAdmitted, "", 1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c, err := b.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 2 {
		m, err := c.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Subject())
	}
	want := []string{"atoll.evt.p.app.web.admitted", "atoll.evt.p.app.web.scheduled"}
	if got[0] != want[0] || got[1] != want[1] {
		t.Errorf("order %v, want %v", got, want)
	}
}

func TestTheWaitForAPredecessorIsBounded(t *testing.T) {
	b := openBus(t)
	tests := []struct {
		name     string
		maxWait  time.Duration
		ctxAfter time.Duration
		wantErr  error
		atLeast  time.Duration
		atMost   time.Duration
	}{
		// Generation 2 was never announced as updated: scheduled still goes out.
		{"by MaxWait", 300 * time.Millisecond, time.Minute, nil, 300 * time.Millisecond, 3 * time.Second},
		{"by the caller's context", time.Minute, 200 * time.Millisecond, context.DeadlineExceeded, 200 * time.Millisecond, 2 * time.Second},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := events.NewPublisher(b, slog.Default(), events.Options{MaxWait: tc.maxWait})
			ctx, cancel := context.WithTimeout(context.Background(), tc.ctxAfter)
			defer cancel()
			w := workload(2)
			w.Metadata.Name = "web" + string(rune('a'+i))
			start := time.Now()
			err := p.Publish(ctx, w, api.EventScheduled, "", 7)
			d := time.Since(start)
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("err %v, want %v", err, tc.wantErr)
			}
			if d < tc.atLeast || d > tc.atMost {
				t.Errorf("returned after %v, want between %v and %v", d, tc.atLeast, tc.atMost)
			}
		})
	}
}

func TestEnsurePublishesEachEventOnce(t *testing.T) {
	ctx := context.Background()
	b := openBus(t)
	p := events.NewPublisher(b, slog.Default(), events.Options{})
	w := workload(1)
	subj := bus.EventSubject("p", api.KindApp, "web", api.EventAdmitted)
	steps := []struct {
		name string
		rev  uint64
		want uint64 // messages on the subject after the step
	}{
		{"missing: published", 5, 1},
		{"present at this revision: nothing", 5, 1},
		{"an older revision: nothing", 3, 1},
		{"a newer revision: published", 9, 2},
	}
	for _, st := range steps {
		if err := p.Ensure(ctx, w, api.EventAdmitted, "", st.rev); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := stored(t, b, subj); got != st.want {
			t.Errorf("%s: %d messages, want %d", st.name, got, st.want)
		}
	}
	// Replicas repairing the same state at once: the idempotency key
	// absorbs the race between their looks and their publishes.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := p.Ensure(ctx, w, api.EventAdmitted, "", 12); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := stored(t, b, subj); got != 3 {
		t.Errorf("concurrent Ensures stored %d messages in all, want 3", got)
	}
}

// A workload that skips a step (placed nowhere, so never propagated) has
// its running event follow the step before: with EnsureAfter it goes out
// as soon as that one is stored, where Ensure waits MaxWait for a
// propagated event that never comes.
func TestEnsureAfterWaitsForTheGivenPredecessor(t *testing.T) {
	ctx := context.Background()
	b := openBus(t)
	const maxWait = time.Minute
	p := events.NewPublisher(b, slog.Default(), events.Options{MaxWait: maxWait})
	w := workload(1)
	w.Metadata.Name = "idle"
	if err := p.Publish(ctx, w, api.EventAdmitted, "", 1); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.EnsureAfter(ctx, w, api.EventRunning, "0/0 ready", 3, api.EventScheduled) }()
	select {
	case err := <-done:
		t.Fatalf("running went out (%v) before scheduled", err)
	case <-time.After(100 * time.Millisecond): // the wait under test: nothing may happen in it
	}
	if err := p.Publish(ctx, w, api.EventScheduled, "", 2); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(maxWait / 2):
		t.Fatal("running still waits for a propagated event after scheduled was stored")
	}
	if n := stored(t, b, "atoll.evt.p.app.idle.running"); n != 1 {
		t.Errorf("%d running events stored, want 1", n)
	}
	if n := stored(t, b, "atoll.evt.p.app.idle.propagated"); n != 0 {
		t.Errorf("%d propagated events stored, want none", n)
	}
}
