package bus

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Mirror keeps the latest value of every key of a bucket in memory, fed by
// a watch. Reads never leave the process; they lag the bucket by the
// watch's delivery time (milliseconds on a healthy bus).
type Mirror struct {
	mu      sync.RWMutex
	entries map[string]MirrorEntry // mu must be held
	ready   chan struct{}
}

// MirrorEntry is one key's latest value and revision.
type MirrorEntry struct {
	Value    []byte
	Revision uint64
}

// Mirror starts mirroring bucket until ctx is done; onChange, if set, is
// called after each key changes (deletes included).
func (b *Bus) Mirror(ctx context.Context, bucket string, onChange func(key string)) (*Mirror, error) {
	return b.MirrorFiltered(ctx, bucket, jetstream.AllKeys, onChange)
}

// MirrorFiltered is Mirror restricted to the keys that match filter, a key
// pattern with the * and > wildcards (such as "p.>").
func (b *Bus) MirrorFiltered(ctx context.Context, bucket, filter string, onChange func(key string)) (*Mirror, error) {
	kv, err := b.KV(ctx, bucket)
	if err != nil {
		return nil, err
	}
	m := &Mirror{entries: map[string]MirrorEntry{}, ready: make(chan struct{})}
	go m.run(ctx, kv, filter, onChange, b)
	return m, nil
}

func (m *Mirror) run(ctx context.Context, kv jetstream.KeyValue, filter string, onChange func(string), b *Bus) {
	var readyOnce sync.Once
	for ctx.Err() == nil {
		reconnected := b.Reconnected() // taken before the watch, so no reconnect slips between
		w, err := kv.Watch(ctx, filter)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-reconnected:
			case <-time.After(time.Second):
			}
			continue
		}
		m.follow(ctx, w, reconnected, onChange, &readyOnce)
		_ = w.Stop()
		if ctx.Err() == nil {
			b.log.Info("mirror watch ended, watching again", "bucket", kv.Bucket())
		}
	}
}

// follow applies a watch's updates until it ends, ctx ends or the
// connection reconnects (then the caller watches again: the replay brings
// what changed while the connection was down, and keys deleted meanwhile
// are dropped when it completes).
func (m *Mirror) follow(ctx context.Context, w jetstream.KeyWatcher, reconnected <-chan struct{}, onChange func(string), readyOnce *sync.Once) {
	replay := map[string]bool{} // keys seen before the watch caught up; nil after
	for {
		var (
			e  jetstream.KeyValueEntry
			ok bool
		)
		select {
		case <-ctx.Done():
			return
		case <-reconnected:
			return
		case e, ok = <-w.Updates():
			if !ok {
				return
			}
		}
		if e == nil {
			// Keys deleted while the watch was down are gone from the replay.
			m.mu.Lock()
			for k := range m.entries {
				if !replay[k] {
					delete(m.entries, k)
				}
			}
			m.mu.Unlock()
			replay = nil
			readyOnce.Do(func() { close(m.ready) })
			continue
		}
		if replay != nil {
			replay[e.Key()] = true
		}
		m.mu.Lock()
		if e.Operation() == jetstream.KeyValuePut {
			m.entries[e.Key()] = MirrorEntry{Value: e.Value(), Revision: e.Revision()}
		} else {
			delete(m.entries, e.Key())
		}
		m.mu.Unlock()
		if onChange != nil {
			onChange(e.Key())
		}
	}
}

// Ready is closed once the mirror holds every key that existed when it started.
func (m *Mirror) Ready() <-chan struct{} { return m.ready }

// Get returns a key's latest value.
func (m *Mirror) Get(key string) (MirrorEntry, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.entries[key]
	return e, ok
}

// Keys returns every key.
func (m *Mirror) Keys() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.entries))
	for k := range m.entries {
		out = append(out, k)
	}
	return out
}

// Len is the number of keys.
func (m *Mirror) Len() int {
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
func (m *Mirror) Resync(ctx context.Context, period time.Duration, q *Queue, before func()) {
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
