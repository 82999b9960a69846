package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/events"
	"atoll.dev/services/scheduler"
)

const (
	clusterCPU = 10 // cores per cluster: room for 10 one-core pods
	podsTotal  = 45 // more than the 30 that fit in the three clusters
)

func openBus(t testing.TB) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: t.Name()})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

func kv(t testing.TB, b *bus.Bus, bucket string) jetstream.KeyValue {
	t.Helper()
	k, err := b.KV(context.Background(), bucket)
	require.NoError(t, err)
	return k
}

// seedClusters writes three healthy clusters of clusterCPU cores each,
// with an inventory computed before any decision.
func seedClusters(t *testing.T, b *bus.Bus) {
	t.Helper()
	for _, z := range []string{"a", "b", "c"} {
		ci := api.ClusterInfo{
			Name: "zone-" + z, Zone: z, Healthy: true, Updated: time.Now().Add(-time.Hour).UTC(),
			Pools: map[string]api.PoolInfo{"general": {
				Nodes: 1, ReadyNodes: 1,
				Allocatable:     api.Quantities{MilliCPU: clusterCPU * 1000, MemoryBytes: 64 << 30},
				AllocatablePods: 110,
				MaxNodeFree:     api.Quantities{MilliCPU: clusterCPU * 1000, MemoryBytes: 64 << 30},
			}},
		}
		body, err := json.Marshal(&ci)
		require.NoError(t, err)
		_, err = kv(t, b, bus.BucketClusters).Put(context.Background(), ci.Name, body)
		require.NoError(t, err)
	}
}

// submit writes Pod workload i of one core, and its admitted event, as
// admission does.
func submit(t *testing.T, b *bus.Bus, pub *events.Publisher, i int) string {
	t.Helper()
	spec := &api.PodSpec{}
	spec.Template.Containers = []api.Container{{Name: "c", Image: "x", Resources: api.Resources{Requests: api.ResourceList{CPU: "1", Memory: "1Gi"}}}}
	spec.Default()
	w := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindPod, Metadata: api.Metadata{Project: "p", Name: fmt.Sprintf("w%03d", i), Generation: 1}, Spec: spec}
	body, err := json.Marshal(w)
	require.NoError(t, err)
	ctx := context.Background()
	rev, err := kv(t, b, bus.BucketWorkloads).Create(ctx, w.Key(), body)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(ctx, w, api.EventAdmitted, "", rev))
	return w.Key()
}

// replica starts a scheduler on its own connection.
func replica(t *testing.T, b *bus.Bus, name string) (*scheduler.Service, *bus.Bus) {
	t.Helper()
	conn, err := b.Connect(name)
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	s := scheduler.New(conn, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
	return s, conn
}

// placements reads every placement.
func placements(t testing.TB, b *bus.Bus) map[string]api.PlacementDecision {
	t.Helper()
	ctx := context.Background()
	k := kv(t, b, bus.BucketPlacements)
	keys, err := k.ListKeys(ctx)
	require.NoError(t, err)
	out := map[string]api.PlacementDecision{}
	for key := range keys.Keys() {
		e, err := k.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		require.NoError(t, err)
		var d api.PlacementDecision
		require.NoError(t, json.Unmarshal(e.Value(), &d))
		out[key] = d
	}
	return out
}

// schedulingEvents counts the scheduled and unschedulable events per workload key.
func schedulingEvents(t *testing.T, b *bus.Bus) map[string]int {
	t.Helper()
	ctx := context.Background()
	c, err := b.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"atoll.evt.>"}})
	require.NoError(t, err)
	out := map[string]int{}
	for {
		batch, err := c.FetchNoWait(500)
		require.NoError(t, err)
		n := 0
		for m := range batch.Messages() {
			n++
			var ev api.WorkloadEvent
			require.NoError(t, json.Unmarshal(m.Data(), &ev))
			if ev.Event == api.EventScheduled || ev.Event == api.EventUnschedulable {
				out[api.Key(ev.Project, ev.Kind, ev.Name)]++
			}
		}
		if n == 0 {
			return out
		}
	}
}

// TestStandbyTakesOverFromKilledHolder runs two replicas on one bus,
// kills the lease holder in the middle of a burst (its connection cut, no
// stop hooks) and checks that the standby finishes the work without
// over-booking a cluster: it rebuilt what the dead holder had placed.
func TestStandbyTakesOverFromKilledHolder(t *testing.T) {
	b := openBus(t)
	seedClusters(t, b)
	pub := events.NewPublisher(b, nil, events.Options{})
	ra, ca := replica(t, b, "scheduler-a")
	rb, cb := replica(t, b, "scheduler-b")
	require.Eventually(t, func() bool { return ra.Leading() || rb.Leading() }, 10*time.Second, 10*time.Millisecond)
	holder, holderConn, standby := ra, ca, rb
	if rb.Leading() {
		holder, holderConn, standby = rb, cb, ra
	}
	assert.False(t, standby.Leading(), "both replicas lead")

	var keys []string
	for i := range podsTotal / 2 {
		keys = append(keys, submit(t, b, pub, i))
	}
	// Kill the holder while it is placing: once some are placed, not all.
	require.Eventually(t, func() bool { return len(placements(t, b)) >= 5 }, 10*time.Second, 5*time.Millisecond)
	killed := time.Now()
	holderConn.NC.Close()
	holder.Stop()
	placedByHolder := len(placements(t, b))

	// Work submitted while nobody leads waits for the standby.
	for i := podsTotal / 2; i < podsTotal; i++ {
		keys = append(keys, submit(t, b, pub, i))
	}
	require.Eventually(t, standby.Leading, 15*time.Second, 10*time.Millisecond)
	takeover := time.Since(killed)
	t.Logf("takeover after the holder was killed: %v (the dead holder had placed %d of %d)", takeover.Round(time.Millisecond), placedByHolder, podsTotal/2)
	assert.Less(t, takeover, 10*time.Second)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, placements(t, b), podsTotal)
	}, 30*time.Second, 20*time.Millisecond, "every workload gets a placement")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ev := schedulingEvents(t, b)
		for _, k := range keys {
			assert.Equal(c, 1, ev[k], "scheduling events of %s", k)
		}
	}, 10*time.Second, 50*time.Millisecond, "one scheduling event per workload")

	perCluster := map[string]int32{}
	placed := 0
	for _, d := range placements(t, b) {
		for _, sh := range d.Shards {
			perCluster[sh.Cluster] += sh.Replicas
		}
		if !d.Unschedulable {
			placed++
		}
	}
	for c, pods := range perCluster {
		assert.LessOrEqual(t, pods, int32(clusterCPU), "cluster %s over-booked", c)
	}
	assert.Equal(t, 3*clusterCPU, placed, "placed workloads: every core used once")

	// Exactly one placement each: no key was ever given shards twice.
	hist := kv(t, b, bus.BucketPlacements)
	for _, k := range keys {
		entries, err := hist.History(context.Background(), k)
		require.NoError(t, err)
		withShards := 0
		for _, e := range entries {
			var d api.PlacementDecision
			if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &d) == nil && len(d.Shards) > 0 {
				withShards++
			}
		}
		assert.LessOrEqual(t, withShards, 1, "%s placed %d times", k, withShards)
	}
}

// TestCleanStopHandsOverAtOnce: a replica that stops cleanly releases the
// lease, so the standby leads without waiting for it to expire.
func TestCleanStopHandsOverAtOnce(t *testing.T) {
	b := openBus(t)
	seedClusters(t, b)
	ra, _ := replica(t, b, "scheduler-a")
	require.Eventually(t, ra.Leading, 10*time.Second, 10*time.Millisecond)
	rb, _ := replica(t, b, "scheduler-b")
	stopped := time.Now()
	ra.Stop()
	require.Eventually(t, rb.Leading, 10*time.Second, 10*time.Millisecond)
	took := time.Since(stopped)
	t.Logf("handover after a clean stop: %v", took.Round(time.Millisecond))
	assert.Less(t, took, 3*time.Second, "the standby waited for the lease to expire")
}

// TestCampaignsOnlyOnceFilled: a replica whose mirrors cannot fill yet
// (its connection's replay slot is held) is ready but does not campaign.
// When the leader stops, the filled standby takes over, not it; when that
// one stops too, the lease stays free until the filling replica has
// filled, which then leads and places a new workload.
func TestCampaignsOnlyOnceFilled(t *testing.T) {
	b := openBus(t)
	seedClusters(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ra, _ := replica(t, b, "scheduler-a")
	require.Eventually(t, ra.Leading, 10*time.Second, 10*time.Millisecond)

	conn, err := b.Connect("scheduler-b")
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	release, err := conn.LoadSlot(ctx)
	require.NoError(t, err)
	rb := scheduler.New(conn, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	require.NoError(t, rb.Start(ctx))
	t.Cleanup(rb.Stop)
	require.NoError(t, rb.Ready(ctx), "ready while filling")
	assert.False(t, rb.Filled())

	rc, _ := replica(t, b, "scheduler-c")
	require.Eventually(t, rc.Filled, 10*time.Second, 10*time.Millisecond)
	ra.Stop()
	require.Eventually(t, rc.Leading, 10*time.Second, 10*time.Millisecond, "the filled standby takes over")
	require.False(t, rb.Leading())

	rc.Stop()
	// A free lease is taken at a replica's first attempt: for 2 s, none.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		require.False(t, rb.Leading(), "the lease taken before the mirrors filled")
		time.Sleep(20 * time.Millisecond)
	}
	release()
	require.Eventually(t, rb.Leading, 10*time.Second, 10*time.Millisecond)
	key := submit(t, b, events.NewPublisher(b, nil, events.Options{}), 1)
	require.Eventually(t, func() bool { _, ok := placements(t, b)[key]; return ok }, 20*time.Second, 20*time.Millisecond, "placed by the replica that filled")
}
