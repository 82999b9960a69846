package admission

import (
	"context"
	"fmt"
	"strings"
	"unique"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// The repair's read of the events stream.
//
// A pass used to ask the stream, for every workload, for the last event on
// the workload's subject (a direct get): at 100,000 workloads, 10 a second
// at rest, each costing the NATS server a load of the message block that
// held it (0.6 ms of its CPU each by profile: a block read from its file
// and indexed for one message), so the region at rest spent more on those
// gets than on anything else that grew with it. A pass now reads the
// stream's headers once, in order (one ordered consumer, headers only), and
// confirms every workload whose event is there; only the others, normally
// none, are looked at one by one (repairKey).

// confirmed holds the workloads bucket revisions whose event the stream
// holds: a revision names one write of one workload. No pointers: the
// collector does not mark it.
type confirmed map[uint64]struct{}

// settled says whether the pass can leave key's entry e alone: its event
// is stored and it has no Config to roll (repairConfigUse).
func (c confirmed) settled(key string, e bus.Entry[repairDoc]) bool {
	if e.Err != nil || rollsConfigs(key, e.Value.raw) {
		return false
	}
	if e.Value.event == "" {
		return true // written before workloads recorded their event
	}
	_, ok := c[e.Revision]
	return ok
}

// rollsConfigs says whether the repair's config-use part has work for key
// on every pass: a Config or Secret, or an App that may name one.
func rollsConfigs(key string, raw []byte) bool {
	_, kind, _, err := api.ParseKey(key)
	if err != nil {
		return false
	}
	switch kind {
	case api.KindConfig, api.KindSecret:
		return true
	case api.KindApp:
		return mayNameConfigs(raw)
	}
	return false
}

// confirmEvents reads the headers of every event the stream holds and
// returns the revisions, as the mirror m holds them, whose event is among
// them. Each event's message id names the workload, the event and the
// revision it was published for (bus.MsgID).
func (s *Service) confirmEvents(ctx context.Context, m *bus.TypedMirror[repairDoc]) (confirmed, int, error) {
	st, err := s.bus.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return nil, 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("events stream info: %w", err)
	}
	out := confirmed{}
	if info.State.Msgs == 0 {
		return out, 0, nil
	}
	last := info.State.LastSeq
	cons, err := s.bus.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverAllPolicy,
		HeadersOnly:   true,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read the events stream: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return nil, 0, fmt.Errorf("read the events stream: %w", err)
	}
	defer it.Stop()
	read := 0
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, read, fmt.Errorf("read the events stream after %d events: %w", read, err)
		}
		read++
		meta, err := msg.Metadata()
		if err != nil {
			return nil, read, fmt.Errorf("read the events stream: %w", err)
		}
		out.add(m, msg.Headers().Get(jetstream.MsgIDHeader))
		if meta.Sequence.Stream >= last || meta.NumPending == 0 {
			return out, read, nil
		}
	}
}

// add confirms the revision an event's message id names when it is the
// current write of its workload in m and the event that write announces.
func (c confirmed) add(m *bus.TypedMirror[repairDoc], id string) {
	ke, rev, ok := bus.ParseMsgID(id)
	if !ok {
		return
	}
	i := strings.LastIndexByte(ke, '.')
	if i < 0 {
		return
	}
	e, ok := m.Get(ke[:i])
	if !ok || e.Err != nil || e.Value.event != ke[i+1:] || rev < e.Revision {
		return
	}
	c[e.Revision] = struct{}{}
}

// internEvent returns the one copy of an event's name: the repair mirror
// holds one per workload.
func internEvent(ev string) string {
	if ev == "" {
		return ""
	}
	return unique.Make(ev).Value()
}
