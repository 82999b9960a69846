package bus

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
//
// A queue made with Instrumented reports its depth, each reconcile's
// duration and failures, and its lag (see Metrics) under its name.
type Queue struct {
	q      workqueue.TypedRateLimitingInterface[string]
	retry  workqueue.TypedRateLimiter[string] // q's limiter, asked directly to log the delay
	closed atomic.Bool
	// retryMax caps the retry delay (RetryMax unless RetryUpTo).
	retryMax time.Duration

	name    string
	metrics *Metrics // nil: not instrumented
	lag     lagClock
}

// QueueOption configures a Queue.
type QueueOption func(*Queue)

// Instrumented names a queue in m's metrics (nil m: no metrics). Queues
// of the same name add up: a service names a queue for its role ("work",
// "replay"), not for the term that made it.
func Instrumented(m *Metrics, name string) QueueOption {
	return func(q *Queue) { q.metrics, q.name = m, name }
}

// lagClock keeps, per key, when a change of it was first queued and not
// yet reconciled successfully: the start of its reconcile lag.
type lagClock struct {
	mu      sync.Mutex
	pending map[string]time.Time // mu must be held: queued since, not yet taken by a worker
	running map[string]time.Time // mu must be held: what the worker on the key covers
}

// queued notes a change of key (a first one since it was last taken).
func (l *lagClock) queued(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[key]; !ok {
		l.pending[key] = now
	}
}

// taken moves key's pending change to its worker.
func (l *lagClock) taken(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.pending[key]; ok {
		l.running[key] = t
		delete(l.pending, key)
	}
}

// finished ends the worker's run on key; it returns when the change it
// covered was queued (ok false if none), and, when the run failed, keeps
// that time for the retry.
func (l *lagClock) finished(key string, failed bool) (since time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	since, ok = l.running[key]
	delete(l.running, key)
	if ok && failed {
		if p, queued := l.pending[key]; !queued || since.Before(p) {
			l.pending[key] = since
		}
		return since, false
	}
	return since, ok
}

// Retry delays of a failing key: RetryBase after the first failure,
// doubled after each further one, at most RetryMax.
const (
	RetryBase = 50 * time.Millisecond
	RetryMax  = 30 * time.Second
)

// RetryUpTo caps a failing key's retry delay at most instead of RetryMax
// (most > 0): a test region, whose member clusters come back within
// seconds, retries sooner than a real one should.
func RetryUpTo(most time.Duration) QueueOption {
	return func(q *Queue) {
		if most > 0 {
			q.retryMax = most
		}
	}
}

// retryLimiter is the per-key exponential backoff, capped at its queue's
// retryMax (which the options set before the queue is used).
type retryLimiter struct {
	workqueue.TypedRateLimiter[string]
	q *Queue
}

func (r retryLimiter) When(key string) time.Duration {
	return min(r.TypedRateLimiter.When(key), r.q.retryMax)
}

// NewQueue returns an empty queue.
func NewQueue(opts ...QueueOption) *Queue {
	q := &Queue{retryMax: RetryMax}
	rl := retryLimiter{workqueue.NewTypedItemExponentialFailureRateLimiter[string](RetryBase, RetryMax), q}
	q.q, q.retry = workqueue.NewTypedRateLimitingQueueWithConfig[string](rl, workqueue.TypedRateLimitingQueueConfig[string]{}), rl
	for _, o := range opts {
		o(q)
	}
	if q.metrics != nil {
		q.lag = lagClock{pending: map[string]time.Time{}, running: map[string]time.Time{}}
	}
	return q
}

// Add queues key. A change queued by Add starts the key's reconcile lag;
// AddAfter (resyncs, delayed checks) does not.
func (q *Queue) Add(key string) {
	if q.metrics != nil {
		q.lag.queued(key, time.Now())
	}
	q.q.Add(key)
}

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
	if q.metrics != nil {
		q.metrics.live.addQueue(q, q.name)
		defer q.metrics.live.removeQueue(q)
	}
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
	err := q.reconcile(ctx, key, fn)
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

// reconcile runs fn on key, recording its duration, failure and lag when
// the queue is instrumented.
func (q *Queue) reconcile(ctx context.Context, key string, fn ReconcileFunc) error {
	m := q.metrics
	if m == nil {
		return fn(ctx, key)
	}
	q.lag.taken(key)
	start := time.Now()
	err := fn(ctx, key)
	end := time.Now()
	m.reconcileDuration.WithLabelValues(q.name).Observe(end.Sub(start).Seconds())
	failed := err != nil && ctx.Err() == nil
	if failed {
		m.reconcileErrors.WithLabelValues(q.name).Inc()
	}
	if since, ok := q.lag.finished(key, failed || ctx.Err() != nil); ok {
		m.reconcileLag.WithLabelValues(q.name).Observe(end.Sub(since).Seconds())
	}
	return err
}
