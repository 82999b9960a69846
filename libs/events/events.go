// Package events publishes workload domain events on
// atoll.evt.<project>.<kind>.<name>.<event>, in the order a workload lives
// them, and never loses one.
//
// Never lost. An event follows a committed state change (a bucket write),
// so it is published synchronously after the write and its error returned:
// the caller publishes inside its reconcile, which retries on error, and
// a process that dies between the write and the publish is repaired by
// whoever reconciles that state next (the restarted service, a standby, a
// resync) calling Ensure. Both publish with the idempotency key
// <key>.<event>@<rev> (rev: the revision of the write), so the stream
// stores an event once however often it is published within the stream's
// duplicate window; Ensure also looks first at the last event stored on
// the subject and publishes nothing when it already holds this event at
// this revision or a later one, which holds past the window too.
//
// In order. Services react to state (Key-Value watches), not to each
// other's events, so a service may be ready to announce a step before the
// previous step's service has announced its own; Publish waits, briefly
// and boundedly (Options.MaxWait), for the predecessor event of the same
// generation, on a timer that ends with the caller's context.
//
// A Publisher holds no state but its configuration and the events
// stream's handle; the package has no mutable state.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// generationStarts are the events that open a new generation of a
// workload: a spec change or an operation. Admission publishes one per
// write and records which in the workload (api.Metadata.Event).
var generationStarts = []string{api.EventAdmitted, api.EventUpdated, api.EventScaled, api.EventPaused,
	api.EventResumed, api.EventStopped, api.EventStarted, api.EventRestarted}

// Predecessors returns the events one of which comes before event.
func Predecessors(event string) []string { return slices.Clone(predecessors[event]) }

// GenerationStarts returns the events that open a new generation.
func GenerationStarts() []string { return slices.Clone(generationStarts) }

// IsGenerationStart reports whether event opens a new generation.
func IsGenerationStart(event string) bool { return slices.Contains(generationStarts, event) }

// predecessors lists, per event, the events one of which must come first.
var predecessors = map[string][]string{
	api.EventScheduled:     generationStarts,
	api.EventUnschedulable: generationStarts,
	api.EventPropagated:    {api.EventScheduled},
	api.EventRunning:       {api.EventPropagated},
	api.EventProgressing:   {api.EventPropagated},
	api.EventSucceeded:     {api.EventPropagated},
	api.EventFailed:        {api.EventPropagated},
}

// DefaultMaxWait bounds the wait for a predecessor when Options.MaxWait is 0.
const DefaultMaxWait = 2 * time.Second

// Options configures a Publisher.
type Options struct {
	// MaxWait bounds the wait for a predecessor event (default
	// DefaultMaxWait). Past it the event is published anyway: the
	// predecessor's service may have died before announcing, and its
	// repair will announce it late.
	MaxWait time.Duration
	// PollMax caps the delay between looks for a predecessor (default 50ms).
	PollMax time.Duration
}

// Publisher publishes domain events on one bus.
type Publisher struct {
	bus  *bus.Bus
	log  *slog.Logger
	opts Options
}

// NewPublisher returns a Publisher on b.
func NewPublisher(b *bus.Bus, log *slog.Logger, o Options) *Publisher {
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.PollMax <= 0 {
		o.PollMax = 50 * time.Millisecond
	}
	if log == nil {
		log = slog.Default()
	}
	return &Publisher{bus: b, log: log.With("component", "events"), opts: o}
}

// MsgID is the idempotency key of event for the workload key at rev.
func MsgID(key, event string, rev uint64) string { return bus.MsgID(key+"."+event, rev) }

// Publish announces event for w, after its predecessor (bounded by
// MaxWait), with idempotency key MsgID(w.Key(), event, rev). rev is the
// revision of the write the event follows; it must grow with each write
// that warrants the event, as a bucket's revisions do.
func (p *Publisher) Publish(ctx context.Context, w *api.Workload, event, message string, rev uint64) error {
	return p.publish(ctx, w, event, message, rev, predecessors[event])
}

func (p *Publisher) publish(ctx context.Context, w *api.Workload, event, message string, rev uint64, after []string) error {
	if err := p.awaitPredecessor(ctx, w, event, after); err != nil {
		return err
	}
	ev := api.WorkloadEvent{
		Project: w.Metadata.Project, Kind: w.Kind, Name: w.Metadata.Name, Event: event,
		Generation: w.Metadata.Generation, Time: time.Now().UTC(), Message: message,
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event %s of %s: %w", event, w.Key(), err)
	}
	id := MsgID(w.Key(), event, rev)
	ce, err := CloudEvent(ev, id, body)
	if err != nil {
		return err
	}
	subj := subject(w, event)
	if _, err := p.bus.Publish(ctx, subj, id, body, CloudEventHeader(ce)); err != nil {
		return fmt.Errorf("event %s of %s: %w", event, w.Key(), err)
	}
	return nil
}

// Ensure publishes event for w at rev unless the stream already holds it,
// or the same event at a later revision: what a reconcile calls every
// time it sees state whose event may not have gone out. See Publish.
func (p *Publisher) Ensure(ctx context.Context, w *api.Workload, event, message string, rev uint64) error {
	return p.EnsureAfter(ctx, w, event, message, rev, predecessors[event]...)
}

// EnsureAfter is Ensure with the events one of which must come first given
// rather than event's own: for a workload that skips a step, whose
// predecessor therefore never comes (a workload placed nowhere because it
// wants no pods is never propagated: its running event follows its
// scheduled event; a policy kind is never placed: its running event
// follows the start of its generation, GenerationStarts).
func (p *Publisher) EnsureAfter(ctx context.Context, w *api.Workload, event, message string, rev uint64, after ...string) error {
	done, err := p.Published(ctx, w, event, rev)
	if err != nil {
		return err
	}
	if done {
		return nil
	}
	return p.publish(ctx, w, event, message, rev, after)
}

// Published reports whether the stream holds event for w at rev or later.
func (p *Publisher) Published(ctx context.Context, w *api.Workload, event string, rev uint64) (bool, error) {
	m, err := p.last(ctx, subject(w, event))
	if err != nil || m == nil {
		return false, err
	}
	key, at, ok := bus.ParseMsgID(m.Header.Get(jetstream.MsgIDHeader))
	return ok && key == w.Key()+"."+event && at >= rev, nil
}

// last returns the newest event stored on subj, or nil when there is none.
func (p *Publisher) last(ctx context.Context, subj string) (*jetstream.RawStreamMsg, error) {
	s, err := p.bus.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return nil, err
	}
	m, err := s.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last event on %s: %w", subj, err)
	}
	return m, nil
}

// awaitPredecessor waits until one of preds, event's predecessors, is
// stored for w's generation, MaxWait passes (then it returns nil: publish
// anyway) or ctx ends (then it returns ctx's error).
func (p *Publisher) awaitPredecessor(ctx context.Context, w *api.Workload, event string, preds []string) error {
	if len(preds) == 0 {
		return nil
	}
	deadline := time.Now().Add(p.opts.MaxWait)
	t := time.NewTimer(0)
	defer t.Stop()
	for delay := time.Millisecond; ; delay = min(2*delay, p.opts.PollMax) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("event %s of %s: wait for its predecessor: %w", event, w.Key(), ctx.Err())
		case <-t.C:
		}
		for _, pred := range preds {
			m, err := p.last(ctx, subject(w, pred))
			if err != nil || m == nil {
				continue
			}
			var ev api.WorkloadEvent
			if json.Unmarshal(m.Data, &ev) == nil && ev.Generation >= w.Metadata.Generation {
				return nil
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			p.log.Debug("predecessor not announced, publishing anyway", "key", w.Key(), "event", event, "generation", w.Metadata.Generation)
			return nil
		}
		t.Reset(min(delay, left))
	}
}

func subject(w *api.Workload, event string) string {
	return bus.EventSubject(w.Metadata.Project, w.Kind, w.Metadata.Name, event)
}
