package bus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
)

// restartableBus opens a bus on a NATS server of its own, and returns a
// function that restarts that server (same port, same store) and waits
// until the bus has reconnected.
func restartableBus(t *testing.T) (*bus.Bus, func()) {
	t.Helper()
	dir := t.TempDir()
	srv, err := bus.StartServer(bus.ServerOptions{StoreDir: dir, Listen: true})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown() })
	port := srv.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{URL: srv.ClientURL(), Name: t.Name()})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b, func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		srv, err = bus.StartServer(bus.ServerOptions{StoreDir: dir, Listen: true, Port: port})
		require.NoError(t, err)
		require.Eventually(t, b.NC.IsConnected, 10*time.Second, 10*time.Millisecond)
	}
}

// TestMirrorFollowsAcrossServerRestart: after the NATS server restarts
// (same port, same store) a mirror sees new writes within a second of the
// reconnect, instead of waiting for its watch's missed heartbeats.
func TestMirrorFollowsAcrossServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, restart := restartableBus(t)
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "before", []byte("1"))
	require.NoError(t, err)
	m, err := b.Mirror(ctx, bus.BucketWorkloads, nil)
	require.NoError(t, err)
	<-m.Ready()
	_, ok := m.Get("before")
	require.True(t, ok)

	restart()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := kv.Put(ctx, "after", []byte("2"))
		assert.NoError(c, err)
	}, 10*time.Second, 50*time.Millisecond)
	written := time.Now()
	require.Eventually(t, func() bool { _, ok := m.Get("after"); return ok }, 3*time.Second, 5*time.Millisecond,
		"the mirror did not follow the restarted server")
	t.Logf("a write after the server restart reached the mirror in %v", time.Since(written))
	_, ok = m.Get("before")
	require.True(t, ok, "the replay after the restart dropped a key that still exists")
}

func TestResyncPassIsBoundedByTheRate(t *testing.T) {
	for _, tc := range []struct {
		keys   int
		period time.Duration
		want   time.Duration
	}{
		{keys: 0, period: 5 * time.Minute, want: 5 * time.Minute},
		{keys: 100, period: 5 * time.Minute, want: 5 * time.Minute},
		{keys: bus.ResyncRate * 300, period: 5 * time.Minute, want: 5 * time.Minute},
		{keys: 50000, period: 5 * time.Minute, want: 50000 * time.Second / bus.ResyncRate},
		{keys: bus.ResyncRate * 3600, period: time.Hour, want: time.Hour},
		{keys: 50000, period: time.Hour, want: 50000 * time.Second / bus.ResyncRate},
	} {
		assert.Equal(t, tc.want, bus.ResyncPass(tc.keys, tc.period), "%d keys, period %v", tc.keys, tc.period)
	}
}

// TestResyncQueuesEveryKeyOncePerPass: with more keys than ResyncRate ×
// period, a pass takes keys / ResyncRate, every key is queued once in it,
// and the next pass does not start before it ends.
func TestResyncQueuesEveryKeyOncePerPass(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: t.Name()})
	require.NoError(t, err)
	defer b.Close()
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	const period, keys = 300 * time.Millisecond, 12
	pass := bus.ResyncPass(keys, period)
	require.Equal(t, 1200*time.Millisecond, pass, "the test needs a pass longer than the period")
	for i := range keys {
		_, err := kv.Put(ctx, fmt.Sprintf("k%02d", i), []byte("v"))
		require.NoError(t, err)
	}
	m, err := b.Mirror(ctx, bus.BucketWorkloads, nil)
	require.NoError(t, err)
	<-m.Ready()

	var mu sync.Mutex
	seen := map[string][]time.Duration{}
	q := bus.NewQueue()
	start := time.Now()
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go q.Run(rctx, 2, slog.New(slog.DiscardHandler), func(_ context.Context, key string) error {
		mu.Lock()
		defer mu.Unlock()
		seen[key] = append(seen[key], time.Since(start))
		return nil
	})
	var passes []time.Duration // when each pass started
	go m.Resync(rctx, period, q, func() {
		mu.Lock()
		passes = append(passes, time.Since(start))
		mu.Unlock()
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		mu.Lock()
		defer mu.Unlock()
		assert.Len(c, seen, keys, "every key queued")
		assert.GreaterOrEqual(c, len(passes), 2, "a second pass")
	}, period+2*pass+5*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.GreaterOrEqual(t, passes[1]-passes[0], pass-50*time.Millisecond,
		"the second pass started %v after the first, before its keys were all due (%v)", passes[1]-passes[0], pass)
	for k, at := range seen {
		assert.Less(t, at[0], passes[1]+100*time.Millisecond, "%s first queued after the first pass", k)
		if len(at) > 1 {
			assert.GreaterOrEqual(t, at[1], passes[1], "%s queued twice in the first pass, at %v", k, at)
		}
	}
}

// TestTypedMirrorDecodesOncePerChange: each put is decoded once, however
// many reads follow, every reader gets the same value, an undecodable
// value is kept with its error, a delete removes the key, and Stop
// returns with the watch ended (later writes are not seen).
func TestTypedMirrorDecodesOncePerChange(t *testing.T) {
	b := openBus(t)
	ctx := t.Context()
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	type doc struct{ N int }
	var decodes atomic.Int64
	decode := func(v []byte) (*doc, error) {
		decodes.Add(1)
		var d doc
		if err := json.Unmarshal(v, &d); err != nil {
			return nil, err
		}
		return &d, nil
	}
	changed := make(chan string, 16)
	m, err := bus.MirrorOf(ctx, b, bus.BucketWorkloads, jetstream.AllKeys, decode, func(k string) { changed <- k })
	require.NoError(t, err)
	<-m.Ready()
	next := func() string {
		select {
		case k := <-changed:
			return k
		case <-time.After(5 * time.Second):
			t.Fatal("no change seen")
			return ""
		}
	}

	_, err = kv.Put(ctx, "a", []byte(`{"N":1}`))
	require.NoError(t, err)
	require.Equal(t, "a", next())
	first, ok := m.Get("a")
	require.True(t, ok)
	for range 10 {
		again, _ := m.Get("a")
		assert.Same(t, first.Value, again.Value, "every reader gets the one decoded value")
	}
	assert.Equal(t, &doc{N: 1}, first.Value)
	assert.Equal(t, int64(1), decodes.Load(), "decoded once for 11 reads")

	_, err = kv.Put(ctx, "b", []byte(`not json`))
	require.NoError(t, err)
	require.Equal(t, "b", next())
	bad, ok := m.Get("b")
	require.True(t, ok, "an undecodable value is still a key")
	assert.Error(t, bad.Err)
	assert.Nil(t, bad.Value)

	require.NoError(t, kv.Delete(ctx, "a"))
	require.Equal(t, "a", next())
	_, ok = m.Get("a")
	assert.False(t, ok)

	m.Stop()
	_, err = kv.Put(ctx, "c", []byte(`{"N":3}`))
	require.NoError(t, err)
	select {
	case k := <-changed:
		t.Fatalf("change of %s seen after Stop", k)
	case <-time.After(200 * time.Millisecond):
	}
	_, ok = m.Get("c")
	assert.False(t, ok)
	assert.Equal(t, int64(2), decodes.Load())
}

// TestKeysNewestFirst: the keys come most recently written first, a key
// written again moving to the front.
func TestKeysNewestFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: t.Name()})
	require.NoError(t, err)
	defer b.Close()
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	var last uint64
	for _, k := range []string{"a", "b", "c", "d", "b"} {
		last, err = kv.Put(ctx, k, []byte(k))
		require.NoError(t, err)
	}
	m, err := b.Mirror(ctx, bus.BucketWorkloads, nil)
	require.NoError(t, err)
	defer m.Stop()
	require.Eventually(t, func() bool { e, ok := m.Get("b"); return ok && e.Revision == last }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"b", "d", "c", "a"}, m.KeysNewestFirst())
}

// TestMirrorResumesAfterServerRestart: after the NATS server restarts
// (same store), a mirror that held the whole bucket resumes from the last
// revision it applied: its callback runs for what changed since, a put
// and a deletion, not again for every key.
func TestMirrorResumesAfterServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, restart := restartableBus(t)
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	const n = 200
	for i := range n {
		_, err = kv.Put(ctx, fmt.Sprintf("k%03d", i), []byte("v"))
		require.NoError(t, err)
	}
	var mu sync.Mutex
	changed := map[string]int{}
	m, err := b.Mirror(ctx, bus.BucketWorkloads, func(k string) {
		mu.Lock()
		changed[k]++
		mu.Unlock()
	})
	require.NoError(t, err)
	defer m.Stop()
	<-m.Ready()
	mu.Lock()
	require.Len(t, changed, n, "the first replay calls back for every key")
	clear(changed)
	mu.Unlock()

	restart()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := kv.Put(ctx, "after", []byte("2"))
		assert.NoError(c, err)
	}, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, kv.Delete(ctx, "k007"))
	require.Eventually(t, func() bool {
		_, put := m.Get("after")
		_, kept := m.Get("k007")
		return put && !kept
	}, 5*time.Second, 5*time.Millisecond, "the mirror follows the restarted server")
	time.Sleep(500 * time.Millisecond) // a whole replay, if one ran, would call back meanwhile
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]int{"after": 1, "k007": 1}, changed, "callbacks after the restart")
	assert.Equal(t, n, m.Len(), "keys held: %d, one put, one deleted", n)
}

// TestMirrorsFillOneAtATime fills seven mirrors of a bucket of 100,000
// values of 2 KB on one connection at once, as a replica of a large
// region does at start (loadslot.go). Filled together, their flow control
// windows overran the server's max_pending and the server cut the
// connection as a slow consumer again and again (43 times in 30 s, never
// filled); one fill at a time, they fill with no cut.
func TestMirrorsFillOneAtATime(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 100,000 keys")
	}
	srv, err := bus.StartServer(bus.ServerOptions{StoreDir: t.TempDir(), Listen: true})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	filler, err := bus.Open(ctx, bus.Config{URL: srv.ClientURL(), Name: "filler"})
	require.NoError(t, err)
	t.Cleanup(filler.Close)
	const keys = 100_000
	value := bytes.Repeat([]byte("x"), 2000)
	for i := range keys {
		_, err := filler.JS.PublishAsync(fmt.Sprintf("$KV.%s.p.app.k%06d", bus.BucketWorkloads, i), value)
		require.NoError(t, err)
	}
	select {
	case <-filler.JS.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("bucket not filled")
	}

	replica, err := bus.Open(ctx, bus.Config{URL: srv.ClientURL(), Name: "replica"})
	require.NoError(t, err)
	t.Cleanup(replica.Close)
	start := time.Now()
	var mirrors []*bus.Mirror
	for range 7 {
		m, err := replica.Mirror(ctx, bus.BucketWorkloads, nil)
		require.NoError(t, err)
		t.Cleanup(m.Stop)
		mirrors = append(mirrors, m)
	}
	wait, stop := context.WithTimeout(ctx, 2*time.Minute)
	defer stop()
	for i, m := range mirrors {
		select {
		case <-m.Ready():
		case <-wait.Done():
			t.Fatalf("mirror %d not filled after %v", i, time.Since(start))
		}
		assert.Equal(t, keys, m.Len())
	}
	v, err := srv.Varz(nil)
	require.NoError(t, err)
	t.Logf("seven mirrors of %d keys filled in %v", keys, time.Since(start).Round(time.Millisecond))
	assert.Zero(t, v.SlowConsumers, "the server cut the replica as a slow consumer")
}

// TestKeyedMirrorHoldsOnlyItsKeys: a keyed mirror holds the keys SetKeys
// names and no other, follows their writes (across a NATS server
// restart too), covers a key only once a watch naming it has caught up,
// drops a key taken out of the set, and past MaxMirrorKeys keys holds
// every key of its filter.
func TestKeyedMirrorHoldsOnlyItsKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, restart := restartableBus(t)
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	put := func(k, v string) {
		t.Helper()
		_, err := kv.Put(ctx, k, []byte(v))
		require.NoError(t, err)
	}
	for i := range 100 {
		put(fmt.Sprintf("p.app.a%d", i), "1")
	}
	put("p.scaler.s", "1")
	var changes atomic.Int64
	m, err := bus.MirrorKeysOf(ctx, b, bus.BucketWorkloads, "*.app.*", func(v []byte) (string, error) { return string(v), nil }, func(string) { changes.Add(1) })
	require.NoError(t, err)
	defer m.Stop()
	<-m.Ready()
	assert.Zero(t, m.Len(), "a keyed mirror of no key holds nothing")
	assert.False(t, m.Covered("p.app.a1"))

	value := func(k string) string {
		e, ok := m.Get(k)
		if !ok {
			return "<none>"
		}
		return e.Value
	}
	m.SetKeys([]string{"p.app.a2", "p.app.a1", "p.app.missing", "p.app.a1"})
	require.Eventually(t, func() bool {
		return m.Covered("p.app.a1") && m.Covered("p.app.a2") && m.Covered("p.app.missing")
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 2, m.Len(), "held: %v", m.Keys())
	assert.False(t, m.Covered("p.app.a3"))
	put("p.app.a3", "2")
	put("p.app.a1", "2")
	require.Eventually(t, func() bool { return value("p.app.a1") == "2" }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, "<none>", value("p.app.a3"), "a key outside the set is not held")

	// A new set: a key dropped is no longer covered at once, nor held
	// once the new watch has caught up; a key kept, unchanged, is not
	// announced again.
	before := changes.Load()
	m.SetKeys([]string{"p.app.a2", "p.app.a3"})
	assert.False(t, m.Covered("p.app.a1"))
	require.Eventually(t, func() bool { return m.Covered("p.app.a3") }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "2", value("p.app.a3"))
	assert.Equal(t, []string{"p.app.a2", "p.app.a3"}, sorted(m.Keys()))
	assert.Equal(t, before+1, changes.Load(), "a new set announces its new key only")

	restart()
	put("p.app.a2", "3")
	require.Eventually(t, func() bool { return value("p.app.a2") == "3" }, 10*time.Second, 10*time.Millisecond, "a write after a restart")
	assert.True(t, m.Covered("p.app.a3"))

	// Past MaxMirrorKeys: the whole filter, not the scaler.
	many := make([]string, bus.MaxMirrorKeys+1)
	for i := range many {
		many[i] = fmt.Sprintf("p.app.m%d", i)
	}
	m.SetKeys(many)
	require.Eventually(t, func() bool { return m.Len() == 100 && m.Covered("p.app.a50") }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "<none>", value("p.scaler.s"))
	assert.Positive(t, changes.Load())
}

func sorted(keys []string) []string {
	slices.Sort(keys)
	return keys
}
