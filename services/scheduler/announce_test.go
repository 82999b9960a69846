package scheduler_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
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
