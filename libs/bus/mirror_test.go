package bus_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
)

// TestMirrorFollowsAcrossServerRestart: after the NATS server restarts
// (same port, same store) a mirror sees new writes within a second of the
// reconnect, instead of waiting for its watch's missed heartbeats.
func TestMirrorFollowsAcrossServerRestart(t *testing.T) {
	dir := t.TempDir()
	srv, err := bus.StartServer(bus.ServerOptions{StoreDir: dir, Listen: true})
	require.NoError(t, err)
	port, url := srv.Addr().(*net.TCPAddr).Port, srv.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{URL: url, Name: t.Name()})
	require.NoError(t, err)
	defer b.Close()
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "before", []byte("1"))
	require.NoError(t, err)
	m, err := b.Mirror(ctx, bus.BucketWorkloads, nil)
	require.NoError(t, err)
	<-m.Ready()
	_, ok := m.Get("before")
	require.True(t, ok)

	srv.Shutdown()
	srv.WaitForShutdown()
	srv, err = bus.StartServer(bus.ServerOptions{StoreDir: dir, Listen: true, Port: port})
	require.NoError(t, err)
	defer srv.Shutdown()
	require.Eventually(t, b.NC.IsConnected, 10*time.Second, 10*time.Millisecond)
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
