package admission

import (
	"context"
	"unique"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
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
// them (events.ReadStored).
func (s *Service) confirmEvents(ctx context.Context, m *bus.TypedMirror[repairDoc]) (confirmed, int, error) {
	out := confirmed{}
	read, err := events.ReadStored(ctx, s.bus, func(key, event string, rev uint64) { out.add(m, key, event, rev) })
	if err != nil {
		return nil, read, err
	}
	return out, read, nil
}

// add confirms the revision an event names when it is the current write
// of its workload in m and the event that write announces.
func (c confirmed) add(m *bus.TypedMirror[repairDoc], key, event string, rev uint64) {
	e, ok := m.Get(key)
	if !ok || e.Err != nil || e.Value.event != event || rev < e.Revision {
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
