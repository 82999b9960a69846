package events_test

import (
	"context"
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

func TestEventsArriveInLifecycleOrder(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The scheduler is ready before admission has announced the workload.
	done := make(chan error, 1)
	go func() { done <- events.Publish(ctx, b, workload(1), api.EventScheduled, "", 2) }()
	time.Sleep(100 * time.Millisecond)
	if err := events.Publish(ctx, b, workload(1), api.EventAdmitted, "", 1); err != nil {
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

func TestAMissingPredecessorDelaysByAtMostMaxWait(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	old := events.MaxWait
	events.MaxWait = 300 * time.Millisecond
	defer func() { events.MaxWait = old }()
	start := time.Now()
	// Generation 2 was never announced as updated: scheduled still goes out.
	if err := events.Publish(ctx, b, workload(2), api.EventScheduled, "", 7); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("published after %v, want after MaxWait (300ms) and soon after", d)
	}
}
