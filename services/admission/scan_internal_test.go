package admission

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/quota"
)

func scanDoc(name string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"scan","name":%q},"spec":{"replicas":1,"template":{"containers":[{"name":"a","image":"nginx"}]}}}`, name)
}

// The repair's pass reads the events stream once and settles exactly the
// workloads whose current write's event it holds: not a write whose
// writer died before its event, nor one whose event names an older write.
func TestConfirmEventsSettlesWhatTheStreamHolds(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	q := quota.New(b, slog.Default(), quota.Ample())
	require.NoError(t, q.Start(ctx))
	t.Cleanup(func() { _ = q.Stop() })

	start := func(crashed bool) *Service {
		s := New(b, slog.Default(), nil)
		if crashed {
			Crash(s)
		}
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { _ = s.Stop() })
		return s
	}
	healthy := start(false)
	scale := func(s *Service, name string, n int32) {
		_, err := s.Operate(ctx, api.Operation{Project: "scan", Kind: api.KindApp, Name: name, Op: api.OpScale, Replicas: &n}, Principal{})
		require.NoError(t, err)
	}
	for _, d := range [][]byte{scanDoc("kept"), scanDoc("scaled"), scanDoc("also"), scanDoc("twice")} {
		_, err := healthy.Submit(ctx, d, Principal{})
		require.NoError(t, err)
	}
	scale(healthy, "twice", 2)
	require.NoError(t, healthy.Stop())
	// A replica that dies after each write: no event for these writes.
	dying := start(true)
	_, err = dying.Submit(ctx, scanDoc("lost"), Principal{})
	require.NoError(t, err)
	scale(dying, "scaled", 3)
	scale(dying, "twice", 3) // the stream holds the scaled event of the write before

	m, err := bus.MirrorOf(ctx, b, bus.BucketWorkloads, jetstream.AllKeys, decodeRepairDoc, nil)
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	<-m.Ready()

	c, read, err := dying.confirmEvents(ctx, m)
	require.NoError(t, err)
	st, err := b.JS.Stream(ctx, bus.StreamEvents)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, int(info.State.Msgs), read, "every event read once")

	want := map[string]bool{"kept": true, "also": true, "lost": false, "scaled": false, "twice": false}
	for name, settled := range want {
		key := api.Key("scan", api.KindApp, name)
		e, ok := m.Get(key)
		require.True(t, ok, key)
		assert.Equal(t, settled, c.settled(key, e), "%s settled", key)
	}
	assert.Len(t, c, 2, "confirmed revisions")

	// Once a replica taking the lease has repaired them, the next pass
	// settles them too.
	require.NoError(t, dying.Stop())
	repairer := start(false)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		c, _, err := repairer.confirmEvents(ctx, m)
		require.NoError(ct, err)
		for name := range want {
			key := api.Key("scan", api.KindApp, name)
			e, _ := m.Get(key)
			assert.True(ct, c.settled(key, e), "%s settled", key)
		}
	}, 20*time.Second, 50*time.Millisecond)
}

// A Config or Secret, and an App that may name one, have the repair's
// config-use part to run on every pass: never settled by their event.
func TestRollsConfigsOnEveryPass(t *testing.T) {
	for _, tc := range []struct {
		key  string
		raw  string
		want bool
	}{
		{api.Key("p", api.KindConfig, "c"), `{}`, true},
		{api.Key("p", api.KindSecret, "s"), `{}`, true},
		{api.Key("p", api.KindApp, "a"), `{"spec":{"template":{"containers":[{"envFrom":[{"config":"c"}]}]}}}`, true},
		{api.Key("p", api.KindApp, "a"), `{"spec":{"template":{"containers":[{"image":"nginx"}]}}}`, false},
		{api.Key("p", api.KindJobSet, "j"), `{"spec":{"template":{"volumes":[]}}}`, false},
		{"not-a-key", `{}`, false},
	} {
		assert.Equal(t, tc.want, rollsConfigs(tc.key, []byte(tc.raw)), "%s %s", tc.key, tc.raw)
	}
}
