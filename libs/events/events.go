// Package events publishes workload domain events on
// atoll.evt.<project>.<kind>.<name>.<event>, in the order a workload lives
// them. Services react to state (Key-Value watches), not to each other's
// events, so a service may be ready to announce a step before the previous
// step's service has announced its own; Publish waits, briefly and
// boundedly, for the predecessor event of the same generation.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// predecessors lists, per event, the events one of which must come first.
// generationStarts are the events that open a new generation: a spec
// change or an operation.
var generationStarts = []string{api.EventAdmitted, api.EventUpdated, api.EventScaled, api.EventPaused,
	api.EventResumed, api.EventStopped, api.EventStarted, api.EventRestarted}

var predecessors = map[string][]string{
	api.EventScheduled:     generationStarts,
	api.EventUnschedulable: generationStarts,
	api.EventPropagated:    {api.EventScheduled},
	api.EventRunning:       {api.EventPropagated},
	api.EventProgressing:   {api.EventPropagated},
	api.EventSucceeded:     {api.EventPropagated},
	api.EventFailed:        {api.EventPropagated},
}

// MaxWait bounds the wait for a predecessor. Past it the event is published
// anyway: the predecessor's service may have died before announcing.
var MaxWait = 2 * time.Second

// Publish announces event for w with idempotency key <key>.<event>@rev.
func Publish(ctx context.Context, b *bus.Bus, w *api.Workload, event, message string, rev uint64) error {
	awaitPredecessor(ctx, b, w, event)
	body, err := json.Marshal(api.WorkloadEvent{
		Project: w.Metadata.Project, Kind: w.Kind, Name: w.Metadata.Name, Event: event,
		Generation: w.Metadata.Generation, Time: time.Now().UTC(), Message: message,
	})
	if err != nil {
		return err
	}
	subj := bus.EventSubject(w.Metadata.Project, w.Kind, w.Metadata.Name, event)
	if _, err := b.Publish(ctx, subj, bus.MsgID(w.Key()+"."+event, rev), body, nil); err != nil {
		return fmt.Errorf("publish %s: %w", subj, err)
	}
	return nil
}

func awaitPredecessor(ctx context.Context, b *bus.Bus, w *api.Workload, event string) {
	preds := predecessors[event]
	if len(preds) == 0 {
		return
	}
	stream, err := eventStream(ctx, b)
	if err != nil {
		return
	}
	deadline := time.Now().Add(MaxWait)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		for _, p := range preds {
			subj := bus.EventSubject(w.Metadata.Project, w.Kind, w.Metadata.Name, p)
			m, err := stream.GetLastMsgForSubject(ctx, subj)
			if errors.Is(err, jetstream.ErrMsgNotFound) || err != nil {
				continue
			}
			var ev api.WorkloadEvent
			if json.Unmarshal(m.Data, &ev) == nil && ev.Generation >= w.Metadata.Generation {
				return
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(delay)
	}
}

// streams caches the events stream handle per bus: looking it up is a
// stream-info request, too dear to make for every event.
var streams sync.Map // *bus.Bus -> jetstream.Stream

func eventStream(ctx context.Context, b *bus.Bus) (jetstream.Stream, error) {
	if s, ok := streams.Load(b); ok {
		return s.(jetstream.Stream), nil
	}
	s, err := b.JS.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return nil, err
	}
	streams.Store(b, s)
	return s, nil
}

// PublishAsync is Publish in its own goroutine, so a caller's worker never
// waits for a predecessor; failures go to log.
func PublishAsync(ctx context.Context, b *bus.Bus, w *api.Workload, event, message string, rev uint64, log *slog.Logger) {
	go func() {
		if err := Publish(ctx, b, w, event, message, rev); err != nil && ctx.Err() == nil {
			log.Warn("publish event", "key", w.Key(), "event", event, "err", err)
		}
	}()
}
