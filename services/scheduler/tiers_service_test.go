package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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

// tieredApp is an App of replicas one-core pods in tier.
func tieredApp(name string, tier api.Tier, replicas int32, priority int32) *api.Workload {
	spec := &api.AppSpec{Replicas: &replicas}
	spec.Tier, spec.Priority = tier, priority
	spec.Template.Containers = []api.Container{{Name: "c", Image: "x", Resources: api.Resources{Requests: api.ResourceList{CPU: "1", Memory: "1Gi"}}}}
	spec.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp, Metadata: api.Metadata{
		Project: "p", Name: name, Generation: 1, Created: time.Now().UTC(),
	}, Spec: spec}
}

// write stores w and its admitted event, as admission does.
func write(t testing.TB, b *bus.Bus, pub *events.Publisher, w *api.Workload) string {
	t.Helper()
	body, err := json.Marshal(w)
	require.NoError(t, err)
	ctx := context.Background()
	rev, err := kv(t, b, bus.BucketWorkloads).Create(ctx, w.Key(), body)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(ctx, w, api.EventAdmitted, "", rev))
	return w.Key()
}

// workloadEvents lists the events of one name, in stream order.
func workloadEvents(t *testing.T, b *bus.Bus, event string) []api.WorkloadEvent {
	t.Helper()
	ctx := context.Background()
	c, err := b.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"atoll.evt.>"}})
	require.NoError(t, err)
	var out []api.WorkloadEvent
	for {
		batch, err := c.FetchNoWait(500)
		require.NoError(t, err)
		n := 0
		for m := range batch.Messages() {
			n++
			var ev api.WorkloadEvent
			require.NoError(t, json.Unmarshal(m.Data(), &ev))
			if ev.Event == event {
				out = append(out, ev)
			}
		}
		if n == 0 {
			return out
		}
	}
}

// TestPreemptionMakesRoomAndGivesItBack fills the three 10-core clusters
// with 30 one-core Preemptible Apps, then submits a Reserved App of 4:
// exactly 4 Preemptible Apps are preempted, each with an event naming
// the Reserved one, and the Reserved App is placed. Deleting it gives the
// room back: the preempted Apps are placed again without resubmission.
func TestPreemptionMakesRoomAndGivesItBack(t *testing.T) {
	b := openBus(t)
	seedClusters(t, b)
	pub := events.NewPublisher(b, nil, events.Options{})
	s, _ := replica(t, b, "scheduler")
	require.Eventually(t, s.Leading, 10*time.Second, 10*time.Millisecond)

	var fill []string
	for i := range 3 * clusterCPU {
		fill = append(fill, write(t, b, pub, tieredApp(fmt.Sprintf("fill%02d", i), api.TierPreemptible, 1, int32(i%3))))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ps := placements(t, b)
		for _, k := range fill {
			assert.NotEmpty(c, ps[k].Shards, "%s placed", k)
		}
	}, 20*time.Second, 20*time.Millisecond, "the region is full of Preemptible work")
	// The aggregator reports the clusters full: no node has a core free.
	syncInventory(t, b)

	submitted := time.Now()
	reserved := write(t, b, pub, tieredApp("urgent", api.TierReserved, 4, 0))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d := placements(t, b)[reserved]
		var n int32
		for _, sh := range d.Shards {
			n += sh.Replicas
		}
		assert.Equal(c, int32(4), n)
	}, 20*time.Second, 10*time.Millisecond, "the Reserved App is placed")
	t.Logf("Reserved App placed %v after its submission", time.Since(submitted).Round(time.Millisecond))

	ps := placements(t, b)
	var victims []string
	perCluster := map[string]int32{}
	for _, k := range fill {
		d := ps[k]
		if d.PreemptedBy != "" {
			victims = append(victims, k)
			assert.Equal(t, reserved, d.PreemptedBy)
			assert.True(t, d.Unschedulable)
			assert.Empty(t, d.Shards)
			assert.Equal(t, string(api.TierPreemptible), d.Queue)
		}
	}
	for _, d := range ps {
		for _, sh := range d.Shards {
			perCluster[sh.Cluster] += sh.Replicas
		}
	}
	assert.Len(t, victims, 4, "the fewest Preemptible replicas are preempted")
	for c, n := range perCluster {
		assert.LessOrEqual(t, n, int32(clusterCPU), "cluster %s over-booked", c)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := workloadEvents(t, b, api.EventPreempted)
		var named []string
		for _, ev := range evs {
			assert.Contains(c, ev.Message, "preempted by "+reserved)
			named = append(named, api.Key(ev.Project, ev.Kind, ev.Name))
		}
		slices.Sort(named)
		assert.Equal(c, victims, named)
	}, 10*time.Second, 20*time.Millisecond, "one preempted event per victim, naming the preemptor")
	// Lowest priority first: every victim has priority 0.
	for _, k := range victims {
		var i int
		_, err := fmt.Sscanf(k, "p.app.fill%02d", &i)
		require.NoError(t, err)
		assert.Equal(t, 0, i%3, "victim %s is not of the lowest priority", k)
	}

	// The Reserved App goes: its room comes back to the preempted work,
	// once the aggregator reports it.
	syncInventory(t, b)
	require.NoError(t, kv(t, b, bus.BucketWorkloads).Delete(context.Background(), reserved))
	back := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, placements(t, b)[reserved].Shards)
	}, 10*time.Second, 10*time.Millisecond, "the Reserved App's placement goes")
	syncInventory(t, b)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ps := placements(t, b)
		for _, k := range victims {
			assert.NotEmpty(c, ps[k].Shards, "%s placed again", k)
			assert.Empty(c, ps[k].PreemptedBy)
		}
	}, 30*time.Second, 50*time.Millisecond, "the preempted Apps run again without resubmission")
	t.Logf("preempted Apps placed again %v after the Reserved App was deleted", time.Since(back).Round(time.Millisecond))
}

// TestReservedJumpsTheQueue writes 300 Preemptible Apps and then one
// Reserved App while no scheduler runs, then starts one: the Reserved App
// is among the first decided, not the last (its queue is ordered by tier,
// not by arrival).
func TestReservedJumpsTheQueue(t *testing.T) {
	b := openBus(t)
	seedClusters(t, b)
	pub := events.NewPublisher(b, nil, events.Options{})
	for i := range 300 {
		write(t, b, pub, tieredApp(fmt.Sprintf("burst%03d", i), api.TierPreemptible, 1, 0))
	}
	reserved := write(t, b, pub, tieredApp("urgent", api.TierReserved, 1, 0))
	s, _ := replica(t, b, "scheduler")
	require.Eventually(t, s.Leading, 10*time.Second, 10*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, placements(t, b), 301)
	}, 60*time.Second, 50*time.Millisecond)
	type decided struct {
		key string
		at  time.Time
	}
	var order []decided
	for k, d := range placements(t, b) {
		order = append(order, decided{k, d.Decided})
	}
	slices.SortFunc(order, func(a, b decided) int { return a.at.Compare(b.at) })
	pos := slices.IndexFunc(order, func(d decided) bool { return d.key == reserved })
	t.Logf("the Reserved App was decided %d of %d", pos+1, len(order))
	// Workers decide in parallel: it may share the first round with them.
	assert.Less(t, pos, scheduler.Workers+scheduler.ReplayWorkers, "the Reserved App waited behind the Preemptible burst")
	assert.False(t, placements(t, b)[reserved].Unschedulable)
}

// syncInventory writes each seeded cluster's inventory as the aggregator
// would once every placed pod runs: one node of clusterCPU cores, the
// placed one-core pods requested, the largest free amount what is left.
func syncInventory(t *testing.T, b *bus.Bus) {
	t.Helper()
	used := map[string]int64{}
	for _, d := range placements(t, b) {
		for _, sh := range d.Shards {
			used[sh.Cluster] += int64(sh.Replicas)
		}
	}
	for _, z := range []string{"a", "b", "c"} {
		name := "zone-" + z
		n := used[name]
		free := max(clusterCPU-n, 0)
		ci := api.ClusterInfo{
			Name: name, Zone: z, Healthy: true, Updated: time.Now().UTC(),
			Pools: map[string]api.PoolInfo{"general": {
				Nodes: 1, ReadyNodes: 1,
				Allocatable:     api.Quantities{MilliCPU: clusterCPU * 1000, MemoryBytes: 64 << 30},
				Requested:       api.Quantities{MilliCPU: n * 1000, MemoryBytes: n << 30},
				AllocatablePods: 110, RequestedPods: n,
				MaxNodeFree: api.Quantities{MilliCPU: free * 1000, MemoryBytes: 64<<30 - n<<30},
			}},
		}
		body, err := json.Marshal(&ci)
		require.NoError(t, err)
		_, err = kv(t, b, bus.BucketClusters).Put(context.Background(), name, body)
		require.NoError(t, err)
	}
}
