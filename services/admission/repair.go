package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
)

// The repair loop (see the package comment).
const (
	// RepairLease is the lease, in bus.BucketLeases, of the replica that
	// runs the repair loop.
	RepairLease = "admission-repair"
	// RepairGrace is how long after a write the repair loop looks at it:
	// time for the writer to publish the event itself.
	RepairGrace = 5 * time.Second
	// RepairEvery is how often every workload is looked at again.
	RepairEvery = 15 * time.Minute
	// RepairDeletesWithin bounds the deletions whose event is repaired: a
	// crash is repaired within minutes, and a bucket keeps a delete marker
	// for every workload ever deleted.
	RepairDeletesWithin = time.Hour
	// RepairRecent: a workload replayed when a replica takes the lease is
	// repaired at once when written within it (a crash between its write
	// and its event is that recent, or a replica was there to repair it),
	// else within a resync pass (bus.ResyncPass), spread out.
	RepairRecent = 2 * time.Minute
	// repairWorkers is how many keys are repaired at once.
	repairWorkers = 4
)

// startRepair runs the repair loop under RepairLease until Stop.
func (s *Service) startRepair(ctx context.Context) error {
	el, err := s.bus.Elector(ctx, lease.NewHolderID("admission"), lease.Options{}, s.log, s.metrics)
	if err != nil {
		return fmt.Errorf("admission repair lease: %w", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.repairing.Go(func() { el.Run(rctx, RepairLease, s.repair) })
	// The sidecar rollout (sidecars_rollout.go), under a lease of its own.
	s.repairing.Go(func() { el.Run(rctx, SidecarLease, s.rollSidecars) })
	return nil
}

// repair ensures, while ctx lasts, the event of every workload's current
// generation and of every recent deletion: each key at once when the
// workloads mirror replays it, RepairGrace after it changes, and again
// every RepairEvery.
func (s *Service) repair(ctx context.Context) {
	s.log.Info("repairing events")
	go s.resumeDeletions(ctx) // cascade.go
	q := bus.NewQueue(bus.Instrumented(s.metrics, "repair"))
	defer q.Close() // also when the term ends before Run (which closes it)
	// The quota checks (repair_quota.go) have a queue of their own, one
	// worker: never a burst beside the creates, even when checks that
	// failed during a bus outage are all retried at its end.
	qq := bus.NewQueue(bus.Instrumented(s.metrics, "quota-check"))
	defer qq.Close()
	var (
		m        *bus.TypedMirror[repairDoc]
		quota    jetstream.KeyValue // read by repairQuota (repair_quota.go)
		live     atomic.Bool        // the mirror has replayed what was there
		replayed keySet             // the keys it replayed, until then
		checks   = quotaChecks{due: map[string]time.Time{}}
	)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 10*time.Second) {
		var err error
		if quota == nil {
			if quota, err = s.bus.KV(ctx, bus.BucketQuota); err != nil {
				s.log.Warn("repair: open the quota bucket", "retry_in", delay, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(delay):
				}
				continue
			}
		}
		m, err = bus.MirrorOf(ctx, s.bus, bus.BucketWorkloads, jetstream.AllKeys, decodeRepairDoc, func(key string) {
			if live.Load() {
				checks.mark(key, time.Now().Add(QuotaRecheck))
				q.AddAfter(key, RepairGrace)
				qq.AddAfter(key, QuotaRecheck)
				return
			}
			replayed.Add(key) // written before this replica looked
		})
		if err == nil {
			break
		}
		s.log.Warn("repair: mirror workloads", "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer m.Stop()
	wg.Go(func() {
		select {
		case <-m.Ready():
		case <-ctx.Done():
			return
		}
		live.Store(true)
		older := queueRecent(q, qq, m, &checks, replayed.take(), time.Now())
		queueOlder(q, m, older, s.confirmPass(ctx, m))
		s.passes(ctx, m, q)
	})
	wg.Go(func() {
		qq.Run(ctx, 1, s.log, func(ctx context.Context, key string) error { return s.quotaCheckKey(ctx, m, quota, &checks, key) })
	})
	q.Run(ctx, repairWorkers, s.log, func(ctx context.Context, key string) error { return s.repairKey(ctx, m, key) })
}

// repairDoc is what the repair mirror holds of a workload: its document's
// bytes, decoded when the key is looked at (at RepairEvery per key, and
// after a write), and when it was admitted. Decoded, the mirror held
// every workload of the region as pointer-rich documents, which the
// runtime's forced collection every two minutes marked even at rest.
type repairDoc struct {
	raw     []byte
	updated time.Time
	// event is the event the write announces ("" for none: a workload
	// written before workloads recorded their event), interned.
	event string
}

// decodeRepairDoc reads a workload's admission time and event for the
// mirror.
func decodeRepairDoc(b []byte) (repairDoc, error) {
	var d struct {
		Metadata struct {
			Updated    time.Time `json:"updated"`
			Generation int64     `json:"generation"`
			Event      string    `json:"event"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return repairDoc{}, err
	}
	return repairDoc{raw: b, updated: d.Metadata.Updated, event: internEvent(announced(d.Metadata.Event, d.Metadata.Generation))}, nil
}

// announced is the event a write of a workload at generation announces,
// given the event its metadata records: "" for none (written before
// workloads recorded their event), the admitted event for a first
// generation that recorded none.
func announced(event string, generation int64) string {
	if event == "" && generation == 1 {
		return api.EventAdmitted
	}
	return event
}

// workloadOf decodes the workload of a repair mirror's entry.
func workloadOf(e bus.Entry[repairDoc]) (*api.Workload, error) {
	if e.Err != nil {
		return nil, e.Err
	}
	return api.Decode(e.Value.raw)
}

// keySet collects keys from the mirror's callbacks.
type keySet struct {
	mu   sync.Mutex
	keys []string
}

func (k *keySet) Add(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = append(k.keys, key)
}

// take returns the keys added so far and empties the set.
func (k *keySet) take() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	keys := k.keys
	k.keys = nil
	return keys
}

// queueRecent queues at once the keys the mirror replayed that were
// written within RepairRecent of now (or deleted: their marker's age is
// repairDelete's to judge), with their quota checks, and returns the
// others, for queueOlder. A replica taking the lease, as admission returns
// from an outage, then checks a few events at once instead of every
// workload's, which, with the requests queued during the outage arriving
// at the same moment, slowed every write of the region's for seconds.
func queueRecent(q, qq *bus.Queue, m *bus.TypedMirror[repairDoc], checks *quotaChecks, keys []string, now time.Time) (older []string) {
	for _, key := range keys {
		e, ok := m.Get(key)
		if ok && e.Err == nil && now.Sub(e.Value.updated) >= RepairRecent {
			older = append(older, key)
			continue
		}
		// Its quota check (repair_quota.go) at a moment of its own.
		later := QuotaRecheck + rand.N(QuotaRecheck)
		checks.mark(key, now.Add(later))
		qq.AddAfter(key, later)
		q.Add(key)
	}
	return older
}

// queueOlder queues each of keys at a random moment of one resync pass
// (bus.ResyncPass) but those the events stream settles (c: their event is
// stored and they have no Config to roll; nil when the stream could not be
// read).
func queueOlder(q *bus.Queue, m *bus.TypedMirror[repairDoc], keys []string, c confirmed) {
	pass := bus.ResyncPass(len(keys), RepairEvery)
	for _, key := range keys {
		if e, ok := m.Get(key); ok && c != nil && c.settled(key, e) {
			continue
		}
		q.AddAfter(key, rand.N(pass))
	}
}

// passes goes over every workload again once per pass (bus.ResyncPass of
// RepairEvery, as long as ctx lasts): it reads the events stream once
// (confirmPass) and queues, each at a random moment of the pass, the keys
// the stream does not settle; every key when it cannot be read.
func (s *Service) passes(ctx context.Context, m *bus.TypedMirror[repairDoc], q *bus.Queue) {
	t := time.NewTimer(bus.ResyncPass(m.Len(), RepairEvery))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		keys := m.Keys()
		queueOlder(q, m, keys, s.confirmPass(ctx, m))
		t.Reset(bus.ResyncPass(len(keys), RepairEvery))
	}
}

// confirmPass reads the events stream for a pass (scan.go); nil, logged,
// when it cannot: the pass then looks at every key.
func (s *Service) confirmPass(ctx context.Context, m *bus.TypedMirror[repairDoc]) confirmed {
	start := time.Now()
	c, read, err := s.confirmEvents(ctx, m)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("repair: read the events stream, looking at every workload instead", "err", err)
		}
		return nil
	}
	s.log.Info("repair: read the events stream", "events", read, "confirmed", len(c), "workloads", m.Len(), "took", time.Since(start).Round(time.Millisecond))
	return c
}

// repairKey ensures the event of key's current generation, or of its
// deletion, as the mirror m and the bucket show them.
func (s *Service) repairKey(ctx context.Context, m *bus.TypedMirror[repairDoc], key string) error {
	e, ok := m.Get(key)
	if !ok {
		return s.repairDelete(ctx, key)
	}
	h, err := headOf(e)
	if err != nil {
		s.log.Warn("repair: undecodable workload", "key", key, "err", err)
		return nil
	}
	event := announced(h.Metadata.Event, h.Metadata.Generation)
	if event == "" {
		return nil // written before workloads recorded their event
	}
	// The whole workload is decoded only when needed: most keys need nothing.
	var w *api.Workload
	decoded := func() bool {
		if w == nil {
			var err error
			if w, err = workloadOf(e); err != nil {
				s.log.Warn("repair: undecodable workload", "key", key, "err", err)
				return false
			}
		}
		return true
	}
	if s.retention.before(ctx, h.Metadata.Updated) {
		s.log.Debug("repair: event older than the events stream keeps", "key", key, "updated", h.Metadata.Updated) // retention.go
	} else {
		done, err := s.events.Published(ctx, h.stub(), event, e.Revision)
		if err != nil {
			return fmt.Errorf("repair %s: %w", key, err)
		}
		if !done {
			if !decoded() {
				return nil
			}
			if err := s.events.Ensure(ctx, w, event, w.Metadata.EventMessage, e.Revision); err != nil {
				return fmt.Errorf("repair %s: %w", key, err)
			}
		}
	}
	if h.Kind == api.KindApp && (!mayNameConfigs(e.Value.raw) || !decoded() || len(w.Spec.PodTemplate().Refs()) == 0) {
		return nil // names no Config (or does not decode): nothing to roll
	}
	return s.repairConfigUse(ctx, key) // configuse.go
}

// repairHead is what the repair reads of every workload it looks at:
// decoding only these fields costs a quarter of decoding the workload
// (BenchmarkRepairRead: 6 µs against 25 µs for a two-container App),
// which the repair needs only for an event to publish or a Config named.
type repairHead struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Project    string    `json:"project"`
		Name       string    `json:"name"`
		Generation int64     `json:"generation"`
		Event      string    `json:"event"`
		Updated    time.Time `json:"updated"`
	} `json:"metadata"`
}

// headOf decodes the head of a repair mirror's entry.
func headOf(e bus.Entry[repairDoc]) (*repairHead, error) {
	if e.Err != nil {
		return nil, e.Err
	}
	var h repairHead
	if err := json.Unmarshal(e.Value.raw, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// stub is the workload as far as its events' subjects name it.
func (h *repairHead) stub() *api.Workload {
	return &api.Workload{Kind: h.Kind, Metadata: api.Metadata{Project: h.Metadata.Project, Name: h.Metadata.Name}}
}

// configFields are the fields through which a pod template names a
// Config or Secret (api.PodTemplate.Uses); a document holding none of
// them, quoted as JSON names, names none. A string value equal to one of
// them only costs a decode.
var configFields = [][]byte{[]byte(`"valueFrom"`), []byte(`"envFrom"`), []byte(`"volumes"`)}

// mayNameConfigs says whether a workload's document may name a Config.
func mayNameConfigs(raw []byte) bool {
	for _, f := range configFields {
		if bytes.Contains(raw, f) {
			return true
		}
	}
	return false
}

// repairDelete ensures the deleted event of key when its latest entry is
// a delete marker younger than RepairDeletesWithin.
func (s *Service) repairDelete(ctx context.Context, key string) error {
	project, kind, name, err := api.ParseKey(key)
	if err != nil {
		return nil
	}
	st, err := s.bus.LastEntry(ctx, bus.BucketWorkloads, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("repair %s: %w", key, err)
	}
	if st.Op == jetstream.KeyValuePut || time.Since(st.Time) > RepairDeletesWithin {
		return nil // there again (its own change is queued), or too old
	}
	w := &api.Workload{Kind: kind, Metadata: api.Metadata{Project: project, Name: name}}
	if done, err := s.events.Published(ctx, w, api.EventDeleted, st.Revision); err != nil || done {
		return err
	}
	// The event names the generation that was deleted: the last one written.
	hist, err := s.workloads.History(ctx, key)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("repair %s: history: %w", key, err)
	}
	for i := len(hist) - 1; i >= 0; i-- {
		if hist[i].Revision() < st.Revision && hist[i].Operation() == jetstream.KeyValuePut {
			if last, err := api.Decode(hist[i].Value()); err == nil {
				w = last
			}
			break
		}
	}
	if err := s.events.Ensure(ctx, w, api.EventDeleted, "", st.Revision); err != nil {
		return fmt.Errorf("repair %s: %w", key, err)
	}
	return nil
}
