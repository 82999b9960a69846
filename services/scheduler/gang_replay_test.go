package scheduler_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
)

// A replica that dies between writing a gang's restart and publishing its
// gang-restarted event: the next holder sends that event once, and a
// further takeover does not send it again.
func TestGangRestartEventIsSentOnceAfterTheWriterDied(t *testing.T) {
	b := openBus(t)
	seedClusters(t, b)
	ctx := context.Background()
	pub := events.NewPublisher(b, slog.New(slog.DiscardHandler), events.Options{})

	spec := &api.TrainingJobSpec{Workers: 2, ReadyTimeoutSeconds: 600}
	spec.Template.Containers = []api.Container{{Name: "t", Image: "x", Resources: api.Resources{Requests: api.ResourceList{CPU: "1", Memory: "1Gi"}}}}
	spec.Default()
	w := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindTrainingJob,
		Metadata: api.Metadata{Project: "p", Name: "gang", Generation: 1, Created: time.Now().UTC()}, Spec: spec}
	key := write(t, b, pub, w)

	// What the dead replica wrote: the gang recreated in zone-a after a
	// failed worker (restart 1, attempt 2), and no event after it.
	now := time.Now().UTC()
	d := api.PlacementDecision{Key: key, Generation: 1, Decided: now,
		Shards: []api.Shard{{Cluster: "zone-a", Zone: "a", Replicas: 2, Attempt: 2}},
		Gang:   &api.GangState{Attempt: 2, Restarts: 1, PlacedAt: now, RestartedAfter: 1}}
	body, err := json.Marshal(&d)
	require.NoError(t, err)
	_, err = kv(t, b, bus.BucketPlacements).Put(ctx, key, body)
	require.NoError(t, err)
	require.Empty(t, workloadEvents(t, b, api.EventGangRestarted))

	first, _ := replica(t, b, "scheduler-1")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, workloadEvents(t, b, api.EventGangRestarted), 1)
	}, 15*time.Second, 50*time.Millisecond, "the restart's event sent by the next holder")
	evs := workloadEvents(t, b, api.EventGangRestarted)
	assert.Contains(t, evs[0].Message, "restart 1 of")

	// Another takeover finds the event out and sends nothing.
	first.Stop()
	second, _ := replica(t, b, "scheduler-2")
	require.Eventually(t, func() bool { return second.Leading() }, 15*time.Second, 50*time.Millisecond)
	// Its replay of every placement comes at once with the lease.
	assert.Never(t, func() bool { return len(workloadEvents(t, b, api.EventGangRestarted)) != 1 }, 3*time.Second, 100*time.Millisecond,
		"gang-restarted sent again by the second holder")
}
