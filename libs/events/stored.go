package events

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/bus"
)

// ReadStored reads the headers of every event the events stream holds
// when it starts, oldest first, through one ordered consumer, and calls fn
// with the workload key, the event and the revision each event's message
// id names (bus.MsgID; an event without one is skipped). It returns how
// many events it read.
//
// It is how a service learns which events are out for a whole region at
// once: a direct get of the last event on a workload's subject (Published)
// costs the NATS server a load of the message block holding it (about
// 0.6 ms of its CPU each, by profile), so asking it for every workload of
// a region of 100,000 at a service's start or on every pass of a repair
// cost more than anything else that grew with the region.
func ReadStored(ctx context.Context, b *bus.Bus, fn func(key, event string, rev uint64)) (int, error) {
	st, err := b.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("events stream info: %w", err)
	}
	if info.State.Msgs == 0 {
		return 0, nil
	}
	last := info.State.LastSeq
	cons, err := b.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverAllPolicy,
		HeadersOnly:   true,
	})
	if err != nil {
		return 0, fmt.Errorf("read the events stream: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return 0, fmt.Errorf("read the events stream: %w", err)
	}
	defer it.Stop()
	read := 0
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return read, fmt.Errorf("read the events stream after %d events: %w", read, err)
		}
		read++
		meta, err := msg.Metadata()
		if err != nil {
			return read, fmt.Errorf("read the events stream: %w", err)
		}
		if ke, rev, ok := bus.ParseMsgID(msg.Headers().Get(jetstream.MsgIDHeader)); ok {
			if i := strings.LastIndexByte(ke, '.'); i > 0 {
				fn(ke[:i], ke[i+1:], rev)
			}
		}
		if meta.Sequence.Stream >= last || meta.NumPending == 0 {
			return read, nil
		}
	}
}
