package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ReconcileFunc brings the world in line with one key's current state. It
// reads what it needs itself (level-triggered), so a missed or repeated
// notification costs latency, never correctness. An error requeues the key
// with backoff.
type ReconcileFunc func(ctx context.Context, key string) error

// Queue is a deduplicating work queue: a key queued while it waits is
// queued once; a key queued while it is being processed runs again after.
type Queue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	order      []string               // mu must be held
	queued     map[string]bool        // mu must be held
	processing map[string]bool        // mu must be held
	dirty      map[string]bool        // mu must be held: re-queue after processing
	failures   map[string]int         // mu must be held
	closed     bool                   // mu must be held
	timers     map[string]*time.Timer // mu must be held
}

// NewQueue returns an empty queue.
func NewQueue() *Queue {
	q := &Queue{
		queued: map[string]bool{}, processing: map[string]bool{}, dirty: map[string]bool{},
		failures: map[string]int{}, timers: map[string]*time.Timer{},
	}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Add queues key.
func (q *Queue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(key)
}

func (q *Queue) addLocked(key string) {
	if q.closed {
		return
	}
	if q.processing[key] {
		q.dirty[key] = true
		return
	}
	if q.queued[key] {
		return
	}
	q.queued[key] = true
	q.order = append(q.order, key)
	q.cond.Signal()
}

// AddAfter queues key after d, unless it is queued sooner.
func (q *Queue) AddAfter(key string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.timers[key] != nil {
		return
	}
	q.timers[key] = time.AfterFunc(d, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		delete(q.timers, key)
		q.addLocked(key)
	})
}

// Len is the number of keys waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}

// get blocks for the next key; ok is false once the queue is closed.
func (q *Queue) get() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", false
	}
	key := q.order[0]
	q.order = q.order[1:]
	delete(q.queued, key)
	q.processing[key] = true
	return key, true
}

// done ends processing of key, re-queueing it if it changed meanwhile or
// after backoff if it failed.
func (q *Queue) done(key string, err error, base, maxDelay time.Duration) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if err == nil {
		delete(q.failures, key)
	} else {
		q.failures[key]++
	}
	if q.dirty[key] {
		delete(q.dirty, key)
		q.addLocked(key)
		return 0
	}
	if err != nil {
		d := base << min(q.failures[key]-1, 16)
		d = Jitter(min(d, maxDelay), 0.2)
		if q.timers[key] == nil && !q.closed {
			q.timers[key] = time.AfterFunc(d, func() {
				q.mu.Lock()
				defer q.mu.Unlock()
				delete(q.timers, key)
				q.addLocked(key)
			})
		}
		return d
	}
	return 0
}

// Close wakes the workers and drops what is queued.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, t := range q.timers {
		t.Stop()
	}
	q.cond.Broadcast()
}

// Run processes keys with n workers until ctx is done.
func (q *Queue) Run(ctx context.Context, n int, log *slog.Logger, fn ReconcileFunc) {
	stop := context.AfterFunc(ctx, q.Close)
	defer stop()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, ok := q.get()
				if !ok {
					return
				}
				err := fn(ctx, key)
				if ctx.Err() != nil {
					q.done(key, nil, 0, 0)
					return
				}
				if d := q.done(key, err, 50*time.Millisecond, 30*time.Second); err != nil {
					log.Warn("reconcile failed, retrying", "key", key, "retry_in", d, "err", err)
				}
			}
		}()
	}
	wg.Wait()
}

// WatchKeys feeds every key of bucket into q: all current keys first, then
// each change (deletes included), and every key again every resync period,
// spread over the period so a resync never arrives as a burst.
// It returns when ctx is done, re-establishing the watch if it breaks.
func (b *Bus) WatchKeys(ctx context.Context, bucket string, resync time.Duration, q *Queue, onInitial func()) error {
	kv, err := b.KV(ctx, bucket)
	if err != nil {
		return err
	}
	log := b.log.With("bucket", bucket)
	initial := true
	var tick <-chan time.Time
	if resync > 0 {
		t := time.NewTicker(resync)
		defer t.Stop()
		tick = t.C
	}
	for ctx.Err() == nil {
		w, err := kv.WatchAll(ctx, jetstream.MetaOnly())
		if err != nil {
			log.Warn("watch", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		if err := b.pump(ctx, w, q, tick, resync, kv, &initial, onInitial); err != nil && ctx.Err() == nil {
			log.Warn("watch ended, re-establishing", "err", err)
		}
		_ = w.Stop()
	}
	return nil
}

var errWatchClosed = errors.New("watch channel closed")

func (b *Bus) pump(ctx context.Context, w jetstream.KeyWatcher, q *Queue, tick <-chan time.Time, resync time.Duration, kv jetstream.KeyValue, initial *bool, onInitial func()) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errWatchClosed
			}
			if e == nil {
				if *initial && onInitial != nil {
					onInitial()
				}
				*initial = false
				continue
			}
			q.Add(e.Key())
		case <-tick:
			keys, err := kv.ListKeys(ctx)
			if err != nil {
				return fmt.Errorf("resync list keys: %w", err)
			}
			for k := range keys.Keys() {
				q.AddAfter(k, rand.N(resync))
			}
		}
	}
}
