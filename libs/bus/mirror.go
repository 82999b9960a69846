package bus

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TypedMirror keeps the latest value of every key of a bucket in memory,
// decoded, fed by a watch. Reads never leave the process; they lag the
// bucket by the watch's delivery time (milliseconds on a healthy bus).
//
// Each key is decoded once per change, when the change arrives, and every
// reader (Get) gets that same value: a reader must not modify it, nor
// anything it points to (copy first: a workload's DeepCopy, a slice's
// slices.Clone). Decoding is the mirror's, so a document read by many
// loops costs one decode per write instead of one per read.
type TypedMirror[T any] struct {
	decode  func([]byte) (T, error)
	log     *slog.Logger
	mu      sync.RWMutex
	entries map[string]Entry[T] // mu must be held
	ready   chan struct{}
	cancel  context.CancelFunc
	done    chan struct{} // closed when the watch loop has ended
	// last is the highest revision applied (a put or a delete), which a
	// watch started again after a reconnect resumes from (resumeFrom).
	last uint64 // mu must be held

	// A keyed mirror (MirrorKeysOf) holds only the keys SetKeys names.
	keyed bool
	// keys is the set SetKeys named last, sorted; covered the keys whose
	// values the mirror is known to follow (nil: every key, once ready).
	keys, covered []string // mu must be held
	refilter      chan struct{}
}

// MaxMirrorKeys is the most keys a keyed mirror watches one by one (a
// consumer's filter subjects, sent in one request); past it, the mirror
// watches its whole filter and holds every key it matches.
const MaxMirrorKeys = 1000

// Entry is one key's latest value and revision. Err is the value's decode
// error, if it did not decode (Value is then T's zero value): the key
// exists but is unreadable to this mirror.
type Entry[T any] struct {
	Value    T
	Revision uint64
	Err      error
}

// Mirror is a mirror of raw values: what each key holds, undecoded.
type Mirror = TypedMirror[[]byte]

// MirrorEntry is one key's latest raw value and revision.
type MirrorEntry = Entry[[]byte]

// Mirror starts mirroring bucket until ctx is done or Stop; onChange, if
// set, is called after each key changes (deletes included).
func (b *Bus) Mirror(ctx context.Context, bucket string, onChange func(key string)) (*Mirror, error) {
	return b.MirrorFiltered(ctx, bucket, jetstream.AllKeys, onChange)
}

// MirrorFiltered is Mirror restricted to the keys that match filter, a key
// pattern with the * and > wildcards (such as "p.>").
func (b *Bus) MirrorFiltered(ctx context.Context, bucket, filter string, onChange func(key string)) (*Mirror, error) {
	return MirrorOf(ctx, b, bucket, filter, func(v []byte) ([]byte, error) { return v, nil }, onChange)
}

// MirrorOf starts mirroring the keys of bucket that match filter (a key
// pattern, jetstream.AllKeys for every key), each value decoded once by
// decode when it changes, until ctx is done or Stop. onChange, if set, is
// called after each key changes (deletes included), once its decoded
// value is in the mirror.
func MirrorOf[T any](ctx context.Context, b *Bus, bucket, filter string, decode func([]byte) (T, error), onChange func(key string)) (*TypedMirror[T], error) {
	kv, err := b.KV(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return startMirror(ctx, b, kv, filter, decode, onChange, false), nil
}

// MirrorKeysOf is MirrorOf of only the keys SetKeys names (none at
// first), for a service that reads a few keys of a large bucket: what it
// holds, and what its fill costs, grows with those keys, not with the
// bucket. A key not yet Covered is read from the bucket instead. Past
// MaxMirrorKeys keys it mirrors every key filter matches.
func MirrorKeysOf[T any](ctx context.Context, b *Bus, bucket, filter string, decode func([]byte) (T, error), onChange func(key string)) (*TypedMirror[T], error) {
	kv, err := b.KV(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return startMirror(ctx, b, kv, filter, decode, onChange, true), nil
}

func startMirror[T any](ctx context.Context, b *Bus, kv jetstream.KeyValue, filter string, decode func([]byte) (T, error), onChange func(key string), keyed bool) *TypedMirror[T] {
	ctx, cancel := context.WithCancel(ctx) //nolint:gosec // G118: Stop calls m.cancel
	m := &TypedMirror[T]{decode: decode, log: b.log, entries: map[string]Entry[T]{}, ready: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
		keyed: keyed, refilter: make(chan struct{}, 1)}
	if keyed {
		m.covered = []string{}
	}
	go func() {
		defer close(m.done)
		m.run(ctx, kv, filter, onChange, b)
	}()
	return m
}

// SetKeys makes a keyed mirror hold keys (and only those): a watch of
// the new set replaces the current one, and each key is Covered once it
// has caught up. A burst of calls costs one new watch.
func (m *TypedMirror[T]) SetKeys(keys []string) {
	sorted := slices.Compact(slices.Sorted(slices.Values(keys)))
	m.mu.Lock()
	if slices.Equal(sorted, m.keys) {
		m.mu.Unlock()
		return
	}
	m.keys = sorted
	if m.covered != nil {
		// A key kept is still followed; a key added is not yet.
		m.covered = slices.DeleteFunc(m.covered, func(k string) bool { _, found := slices.BinarySearch(sorted, k); return !found })
	}
	m.mu.Unlock()
	select {
	case m.refilter <- struct{}{}:
	default:
	}
}

// Covered reports whether the mirror follows key (one its filter
// matches): always once a mirror of its whole filter is ready; for a
// keyed mirror, once a watch naming key has caught up.
func (m *TypedMirror[T]) Covered(key string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.covered == nil {
		select {
		case <-m.ready:
			return true
		default:
			return false
		}
	}
	_, found := slices.BinarySearch(m.covered, key)
	return found
}

// watchSet is what the next watch follows: its filters, and the keys it
// covers once caught up (nil: every key of filter).
func (m *TypedMirror[T]) watchSet(filter string) (filters, covers []string) {
	if !m.keyed {
		return []string{filter}, nil
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if len(m.keys) > MaxMirrorKeys {
		return []string{filter}, nil
	}
	// A copy: a KeyValue's WatchFiltered rewrites its keys into subjects.
	return slices.Clone(m.keys), m.keys
}

// Stop ends the mirror's watch and returns once its goroutine has ended;
// the mirror keeps what it held. Stop on a nil mirror does nothing, so
// that a service's Stop can call it whether or not its Start got so far.
func (m *TypedMirror[T]) Stop() {
	if m == nil {
		return
	}
	m.cancel()
	<-m.done
}

func (m *TypedMirror[T]) run(ctx context.Context, kv jetstream.KeyValue, filter string, onChange func(string), b *Bus) {
	var readyOnce sync.Once
	refiltered := false // the key set changed: the next watch replays it whole
	for ctx.Err() == nil {
		reconnected := b.Reconnected() // taken before the watch, so no reconnect slips between
		filters, covers := m.watchSet(filter)
		if len(filters) == 0 {
			// A keyed mirror of no key: nothing to watch until SetKeys.
			m.mu.Lock()
			clear(m.entries)
			m.covered = []string{}
			m.mu.Unlock()
			readyOnce.Do(func() { close(m.ready) })
			select {
			case <-ctx.Done():
				return
			case <-m.refilter:
				refiltered = true
				continue
			}
		}
		var opts []jetstream.WatchOpt
		from := m.resumeFrom(ctx, kv)
		if refiltered {
			from = 0
		}
		release := func() {}
		if from > 0 {
			opts = append(opts, jetstream.ResumeFromRevision(from))
		} else {
			// A whole replay: one at a time on the connection (loadslot.go).
			var err error
			if release, err = b.LoadSlot(ctx); err != nil {
				return
			}
		}
		w, err := kv.WatchFiltered(ctx, filters, opts...)
		if err != nil {
			b.log.Debug("mirror: watch", "bucket", kv.Bucket(), "err", err)
			release()
			select {
			case <-ctx.Done():
			case <-reconnected:
			case <-time.After(time.Second):
			}
			continue
		}
		caughtUp := func() {
			release()
			if m.keyed {
				m.mu.Lock()
				m.covered = covers
				m.mu.Unlock()
			}
		}
		refiltered = m.follow(ctx, w, reconnected, onChange, &readyOnce, from > 0, caughtUp)
		release()
		_ = w.Stop()
		if ctx.Err() == nil && !refiltered {
			b.log.Info("mirror watch ended, watching again", "bucket", kv.Bucket())
		}
	}
}

// resumeFrom is the revision a new watch starts from: after the last one
// this mirror applied, once it has held the whole bucket, so that a
// reconnect (a NATS server restart) brings only what changed meanwhile,
// deletions included (a deleted key's marker stays in the stream), not a
// replay of every key with a callback for each (at 100,000 workloads,
// every service replaying every key at once after a NATS restart held
// new submissions for 40-60 s). 0, a whole replay: before the first one
// completes, for a bucket whose keys expire (an expired key leaves no
// marker), and when the stream holds fewer revisions than the mirror has
// seen (its store was lost or replaced).
func (m *TypedMirror[T]) resumeFrom(ctx context.Context, kv jetstream.KeyValue) uint64 {
	select {
	case <-m.ready:
	default:
		return 0
	}
	m.mu.RLock()
	last := m.last
	m.mu.RUnlock()
	if last == 0 {
		return 0
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := kv.Status(sctx)
	if err != nil || st.TTL() > 0 {
		return 0
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo().State.LastSeq < last {
		return 0
	}
	return last + 1
}

// follow applies a watch's updates until it ends, ctx ends or the
// connection reconnects (then the caller watches again: the replay, or
// with resumed the updates since the last revision applied, brings what
// changed while the connection was down; after a whole replay, keys
// deleted meanwhile are dropped when it completes). caughtUp is called
// when the watch has delivered every key that existed when it started.
//
// It returns true when it ended for a new key set (SetKeys).
func (m *TypedMirror[T]) follow(ctx context.Context, w jetstream.KeyWatcher, reconnected <-chan struct{}, onChange func(string), readyOnce *sync.Once, resumed bool, caughtUp func()) bool {
	replay := map[string]bool{} // keys seen before the watch caught up; nil after
	if resumed {
		replay = nil
	}
	for {
		var (
			e  jetstream.KeyValueEntry
			ok bool
		)
		select {
		case <-ctx.Done():
			return false
		case <-reconnected:
			return false
		case <-m.refilter:
			return true
		case e, ok = <-w.Updates():
			if !ok {
				return false
			}
		}
		if e == nil {
			caughtUp()
			if replay != nil {
				// Keys deleted while the watch was down are gone from the replay.
				m.mu.Lock()
				for k := range m.entries {
					if !replay[k] {
						delete(m.entries, k)
					}
				}
				m.mu.Unlock()
				replay = nil
			}
			readyOnce.Do(func() { close(m.ready) })
			continue
		}
		if replay != nil {
			replay[e.Key()] = true
		}
		if m.keyed && e.Operation() == jetstream.KeyValuePut {
			// A new key set replays every key: one already held at
			// this revision has not changed.
			m.mu.RLock()
			held, ok := m.entries[e.Key()]
			m.mu.RUnlock()
			if ok && held.Revision == e.Revision() {
				continue
			}
		}
		if e.Operation() == jetstream.KeyValuePut {
			v, err := m.decode(e.Value()) // outside the lock: readers go on meanwhile
			if err != nil {
				m.log.Warn("mirror: undecodable value", "bucket", e.Bucket(), "key", e.Key(), "revision", e.Revision(), "err", err)
			}
			m.mu.Lock()
			m.entries[e.Key()] = Entry[T]{Value: v, Revision: e.Revision(), Err: err}
			m.last = max(m.last, e.Revision())
			m.mu.Unlock()
		} else {
			m.mu.Lock()
			delete(m.entries, e.Key())
			m.last = max(m.last, e.Revision())
			m.mu.Unlock()
		}
		if onChange != nil {
			onChange(e.Key())
		}
	}
}

// Ready is closed once the mirror holds every key that existed when it started.
func (m *TypedMirror[T]) Ready() <-chan struct{} { return m.ready }

// Get returns a key's latest value: the mirror's own, shared with every
// other reader, not to be modified.
func (m *TypedMirror[T]) Get(key string) (Entry[T], bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.entries[key]
	return e, ok
}

// Keys returns every key.
func (m *TypedMirror[T]) Keys() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.entries))
	for k := range m.entries {
		out = append(out, k)
	}
	return out
}

// KeysNewestFirst returns the keys, the most recently written first (by
// revision). A term that goes over every key at its start begins with
// those written while no replica held it: a workload submitted while a
// service restarted is then not found after a replay of every other key
// in the mirror's order.
func (m *TypedMirror[T]) KeysNewestFirst() []string {
	type keyRev struct {
		key string
		rev uint64
	}
	m.mu.RLock()
	all := make([]keyRev, 0, len(m.entries))
	for k, e := range m.entries {
		all = append(all, keyRev{k, e.Revision})
	}
	m.mu.RUnlock()
	slices.SortFunc(all, func(a, b keyRev) int { return cmp.Compare(b.rev, a.rev) })
	out := make([]string, len(all))
	for i, kr := range all {
		out[i] = kr.key
	}
	return out
}

// Len is the number of keys.
func (m *TypedMirror[T]) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.entries)
}

// ResyncRate bounds, on average, how many keys per second one Resync
// queues: a bucket of up to ResyncRate × period keys is gone over once
// per period; a larger one once per n / ResyncRate. So the background
// work a resync adds stays the same however many keys the bucket holds
// (measured before the bound: at 50,000 workloads the resyncs of the
// aggregator, propagator and scheduler took a quarter of a core with
// nothing submitted); what grows is how long the safety net takes to
// come round to a key (at 50,000 keys, 83 minutes). A change still
// reaches every service at once through its watch; a resync only
// repairs what a watch cannot see, and Kubernetes' own controllers go
// over their informers' caches every 12-24 hours
// (kube-controller-manager's --min-resync-period).
//
// Why 10 and not more: a region runs about nine resyncs (the
// scheduler's two, the aggregator's two, the propagator's one per member
// cluster, admission's repair) and the quota service's sweep at this
// rate. At 50 a second each, a region holding 50,000 workloads spent 12%
// of a core on them with nothing submitted (profiles of the scale
// bench's idle window: the aggregator 4.5%, the scheduler 2.1%, the
// propagator 1.9%, the NATS server 3%), and the same during every round
// of submissions, which made its P99 twice the P99 at 100 on the 2-core
// machine the bench runs on (no resync comes round at 100 workloads).
const ResyncRate = 10

// ResyncPass is how long one Resync pass over n keys takes for a period.
func ResyncPass(n int, period time.Duration) time.Duration {
	return max(period, time.Duration(n)*time.Second/ResyncRate)
}

// Resync queues every key into q once per pass (ResyncPass: the period,
// or longer for a bucket of more than ResyncRate × period keys), each
// after a random delay within the pass, so a resync never arrives as a
// burst. before, if set, runs at the start of each pass. It returns when
// ctx is done.
func (m *TypedMirror[T]) Resync(ctx context.Context, period time.Duration, q *Queue, before func()) {
	t := time.NewTimer(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if before != nil {
			before()
		}
		keys := m.Keys()
		pass := ResyncPass(len(keys), period)
		for _, k := range keys {
			q.AddAfter(k, rand.N(pass))
		}
		t.Reset(pass)
	}
}
