package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/util/workqueue"
)

// ReconcileFunc brings the world in line with one key's current state. It
// reads what it needs itself (level-triggered), so a missed or repeated
// notification costs latency, never correctness. An error requeues the key
// with backoff.
type ReconcileFunc func(ctx context.Context, key string) error

// Queue is a deduplicating, rate-limited work queue of keys: client-go's
// workqueue (the one Kubernetes controllers use) behind the small API the
// services need. A key queued while it waits is queued once; a key queued
// while it is being processed runs again after; a key whose reconcile
// fails comes back after a per-key exponential backoff (RetryBase doubling
// up to RetryMax) and its backoff resets when it succeeds.
type Queue struct {
	q      workqueue.TypedRateLimitingInterface[string]
	retry  workqueue.TypedRateLimiter[string] // q's limiter, asked directly to log the delay
	closed atomic.Bool
}

// Retry delays of a failing key: RetryBase after the first failure,
// doubled after each further one, at most RetryMax.
const (
	RetryBase = 50 * time.Millisecond
	RetryMax  = 30 * time.Second
)

// NewQueue returns an empty queue.
func NewQueue() *Queue {
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[string](RetryBase, RetryMax)
	return &Queue{q: workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[string]{}), retry: rl}
}

// Add queues key.
func (q *Queue) Add(key string) { q.q.Add(key) }

// AddAfter queues key after d, unless it is queued sooner.
func (q *Queue) AddAfter(key string, d time.Duration) { q.q.AddAfter(key, d) }

// Len is the number of keys ready and waiting for a worker.
func (q *Queue) Len() int { return q.q.Len() }

// Close wakes the workers and drops what is queued.
func (q *Queue) Close() {
	q.closed.Store(true)
	q.q.ShutDown()
}

// Run processes keys with n workers until ctx is done (or the queue is
// closed), then returns once every worker has finished its key.
func (q *Queue) Run(ctx context.Context, n int, log *slog.Logger, fn ReconcileFunc) {
	stop := context.AfterFunc(ctx, q.Close)
	defer stop()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for q.next(ctx, log, fn) {
			}
		})
	}
	wg.Wait()
}

// next reconciles one key; it reports false once the queue is closed.
func (q *Queue) next(ctx context.Context, log *slog.Logger, fn ReconcileFunc) bool {
	key, shutdown := q.q.Get()
	if shutdown {
		return false
	}
	defer q.q.Done(key)
	if q.closed.Load() {
		// The workqueue hands out what is left after a shutdown; a closed
		// Queue drops it.
		return false
	}
	err := fn(ctx, key)
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		// AddRateLimited, with the delay at hand for the log.
		d := q.retry.When(key)
		q.q.AddAfter(key, d)
		log.Warn("reconcile failed, retrying", "key", key, "retry_in", d, "err", err)
	default:
		q.q.Forget(key)
	}
	return true
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
