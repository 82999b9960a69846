package bus_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
)

func TestQueueDeduplicatesAndRetries(t *testing.T) {
	q := bus.NewQueue()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu    sync.Mutex
		calls = map[string]int{}
		block = make(chan struct{})
	)
	for range 5 {
		q.Add("a") // queued once
	}
	go q.Run(ctx, 2, slog.Default(), func(ctx context.Context, key string) error {
		mu.Lock()
		calls[key]++
		n := calls[key]
		mu.Unlock()
		switch {
		case key == "a" && n == 1:
			<-block // while "a" is processed, it is queued again
			return nil
		case key == "flaky" && n < 3:
			return errors.New("not yet")
		}
		return nil
	})
	q.Add("flaky")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(c, 1, calls["a"], `"a" being processed`)
	}, 5*time.Second, time.Millisecond)
	q.Add("a")
	q.Add("a")
	close(block)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(c, map[string]int{"a": 2, "flaky": 3}, calls)
	}, 5*time.Second, 20*time.Millisecond)
}

func TestMirrorFollowsTheBucket(t *testing.T) {
	b := openBus(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, _ := b.KV(ctx, bus.BucketPlacements)
	if _, err := kv.Put(ctx, "p.app.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	changed := make(chan string, 10)
	m, err := b.Mirror(ctx, bus.BucketPlacements, func(k string) { changed <- k })
	if err != nil {
		t.Fatal(err)
	}
	<-m.Ready()
	if e, ok := m.Get("p.app.a"); !ok || string(e.Value) != "1" {
		t.Fatalf("existing key: %q %v", e.Value, ok)
	}
	rev, _ := kv.Put(ctx, "p.app.a", []byte("2"))
	_ = kv.Delete(ctx, "p.app.gone")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		e, _ := m.Get("p.app.a")
		assert.Equal(c, rev, e.Revision, "mirrored revision")
		assert.Equal(c, "2", string(e.Value), "mirrored value")
	}, 2*time.Second, 10*time.Millisecond)
	if err := kv.Delete(ctx, "p.app.a"); err != nil {
		t.Fatal(err)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, ok := m.Get("p.app.a")
		assert.False(c, ok, "deleted key still mirrored")
		assert.Zero(c, m.Len(), "keys mirrored")
	}, 2*time.Second, 10*time.Millisecond)
}

// TestQueueRetryUpTo: a key that keeps failing is retried with doubling
// delays capped at RetryUpTo's bound, not bus.RetryMax: after the
// delays reach 200ms the retries stay that far apart.
func TestQueueRetryUpTo(t *testing.T) {
	const most = 200 * time.Millisecond
	q := bus.NewQueue(bus.RetryUpTo(most))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu    sync.Mutex
		calls []time.Time
	)
	q.Add("a")
	go q.Run(ctx, 1, slog.New(slog.DiscardHandler), func(context.Context, string) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, time.Now())
		return errors.New("down")
	})
	// Delays of 50, 100, 200, 200, 200 and 200 ms: 7 calls within about
	// 0.95 s; with bus.RetryMax the 7th would come after 3.15 s.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) >= 7
	}, 3*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for i := 4; i < 7; i++ {
		gap := calls[i].Sub(calls[i-1])
		assert.GreaterOrEqual(t, gap, most-20*time.Millisecond, "retry %d after %v", i, gap)
		assert.Less(t, gap, 2*most, "retry %d after %v: not capped at %v", i, gap, most)
	}
}
