package scheduler_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
	"atoll.dev/services/scheduler"
)

// A new term's replay ensures at once the events of the placements written
// within the announce window of the newest one (a replica that died may
// have left them unannounced) and those of older placements later, at the
// announce rate: each exactly once in the end.
func TestReplayAnnouncesRecentPlacementsFirst(t *testing.T) {
	b := openBus(t)
	seedClusters(t, b)
	ctx := context.Background()
	pub := events.NewPublisher(b, slog.New(slog.DiscardHandler), events.Options{})
	// place writes Pod i and a placement of it, as a replica that died
	// before announcing it left them.
	place := func(i int) string {
		key := submit(t, b, pub, i)
		d := api.PlacementDecision{Key: key, Generation: 1, Decided: time.Now().UTC(),
			Shards: []api.Shard{{Cluster: "zone-a", Zone: "a", Replicas: 1}}}
		body, err := json.Marshal(&d)
		require.NoError(t, err)
		_, err = kv(t, b, bus.BucketPlacements).Put(ctx, key, body)
		require.NoError(t, err)
		return key
	}
	old := []string{place(0), place(1), place(2)}
	time.Sleep(1500 * time.Millisecond)
	recent := place(3)
	require.Empty(t, schedulingEvents(t, b))

	conn, err := b.Connect("scheduler-1")
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	s := scheduler.New(conn, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	s.Options.AnnounceWindow = time.Second
	s.Options.AnnounceRate = 0.5 // one older placement every 2 s
	require.NoError(t, s.Start(ctx))
	t.Cleanup(s.Stop)

	var got map[string]int
	require.Eventually(t, func() bool { got = schedulingEvents(t, b); return got[recent] == 1 }, 15*time.Second, 20*time.Millisecond,
		"the recent placement announced by the replay")
	for _, k := range old {
		assert.Zero(t, got[k], "%s, older than the window, announced with the replay", k)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := schedulingEvents(t, b)
		for _, k := range old {
			assert.Equal(c, 1, got[k], k)
		}
	}, 15*time.Second, 100*time.Millisecond, "the older placements announced at the announce rate")
	assert.Never(t, func() bool {
		for _, n := range schedulingEvents(t, b) {
			if n != 1 {
				return true
			}
		}
		return false
	}, time.Second, 100*time.Millisecond, "an event sent twice")
}

// settleLog records the settled count of each read of the events stream
// a scheduler logs.
type settleLog struct {
	mu      sync.Mutex
	settled []int64
}

func (l *settleLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *settleLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *settleLog) WithGroup(string) slog.Handler            { return l }
func (l *settleLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "read the events stream" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "settled" {
			l.mu.Lock()
			l.settled = append(l.settled, a.Value.Int64())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *settleLog) reads() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.settled)
}

// TestStoredEventsSettleOlderPlacements: a new term reads the events
// stream once and settles the older placements whose scheduled event is
// stored for their revision, so only the others are ensured one by one:
// of 12 placements older than the announce window, the 10 announced are
// settled by the read; one never announced, and one placed again after
// its announce (its stored event names the placement before), are
// announced by the later queue, the recent one by the replay; no event is
// sent twice.
func TestStoredEventsSettleOlderPlacements(t *testing.T) {
	b := openBus(t)
	seedClusters(t, b)
	ctx := context.Background()
	pub := events.NewPublisher(b, slog.New(slog.DiscardHandler), events.Options{})
	place := func(key string) (uint64, *api.Workload) {
		d := api.PlacementDecision{Key: key, Generation: 1, Decided: time.Now().UTC(),
			Shards: []api.Shard{{Cluster: "zone-a", Zone: "a", Replicas: 1}}}
		body, err := json.Marshal(&d)
		require.NoError(t, err)
		rev, err := kv(t, b, bus.BucketPlacements).Put(ctx, key, body)
		require.NoError(t, err)
		e, err := kv(t, b, bus.BucketWorkloads).Get(ctx, key)
		require.NoError(t, err)
		w, err := api.Decode(e.Value())
		require.NoError(t, err)
		return rev, w
	}
	var stored []string
	for i := range 10 {
		key := submit(t, b, pub, i)
		rev, w := place(key)
		require.NoError(t, pub.Publish(ctx, w, api.EventScheduled, "1 shards", rev))
		stored = append(stored, key)
	}
	unannounced := submit(t, b, pub, 10)
	place(unannounced)
	replaced := submit(t, b, pub, 11)
	rev, w := place(replaced)
	require.NoError(t, pub.Publish(ctx, w, api.EventScheduled, "1 shards", rev))
	place(replaced) // a second placement, never announced
	time.Sleep(1500 * time.Millisecond)
	recent := submit(t, b, pub, 12) // the newest: the 12 before are older than the window
	place(recent)

	conn, err := b.Connect("scheduler-1")
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	logs := &settleLog{}
	s := scheduler.New(conn, slog.New(logs))
	s.Options.AnnounceWindow = time.Second
	s.Options.AnnounceRate = 2
	require.NoError(t, s.Start(ctx))
	t.Cleanup(s.Stop)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := schedulingEvents(t, b)
		assert.Equal(c, 1, got[unannounced], "the placement never announced")
		assert.Equal(c, 2, got[replaced], "the placement whose stored event names the one before")
		assert.Equal(c, 1, got[recent], "the recent placement")
	}, 15*time.Second, 50*time.Millisecond)
	assert.Equal(t, []int64{10}, logs.reads(), "placements settled by the term's read of the stream")
	assert.Never(t, func() bool {
		got := schedulingEvents(t, b)
		for _, k := range stored {
			if got[k] != 1 {
				return true
			}
		}
		return got[unannounced] != 1 || got[replaced] != 2 || got[recent] != 1
	}, time.Second, 100*time.Millisecond, "an event sent twice")
}
