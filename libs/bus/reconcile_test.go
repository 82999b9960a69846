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
