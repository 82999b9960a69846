package tiers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/scheduler"
)

// appDoc is an App of replicas pods of cpu each, in tier, with the
// given priority and, when zone is set, placed only there.
func appDoc(project, name string, tier api.Tier, replicas int, cpu string, priority int, zone string) []byte {
	placement := ""
	if zone != "" {
		placement = fmt.Sprintf(`,"placement":{"zones":[%q]}`, zone)
	}
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"tier":%q,"priority":%d,"replicas":%d%s,"template":{"containers":[{"name":"c","image":"busybox","resources":{"requests":{"cpu":%q,"memory":"256Mi"}}}]}}}`,
		project, name, tier, priority, replicas, placement, cpu))
}

func submit(t *testing.T, doc []byte) {
	t.Helper()
	_, err := cl.Submit(context.Background(), doc)
	require.NoError(t, err)
}

// readyPods is the workload's ready pods per its status (0 without one).
func readyPods(key string) int32 {
	st, err := cl.Status(context.Background(), key)
	if err != nil || st == nil {
		return 0
	}
	return st.Ready
}

func placement(t *testing.T, key string) *api.PlacementDecision {
	t.Helper()
	p, err := cl.Placement(context.Background(), key)
	require.NoError(t, err)
	return p
}

// eventsOf lists the events of name in project from the events stream,
// in stream order.
func eventsOf(t *testing.T, project, name string) []api.WorkloadEvent {
	t.Helper()
	ctx := context.Background()
	c, err := reg.Bus.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"atoll.evt." + project + ".>"}})
	require.NoError(t, err)
	var out []api.WorkloadEvent
	for {
		batch, err := c.FetchNoWait(1000)
		require.NoError(t, err)
		n := 0
		for m := range batch.Messages() {
			n++
			var ev api.WorkloadEvent
			require.NoError(t, json.Unmarshal(m.Data(), &ev))
			if ev.Event == name {
				out = append(out, ev)
			}
		}
		if n == 0 {
			return out
		}
	}
}

// deleteAll deletes the project's Apps named and waits until their
// placements are gone (the propagator then removes their objects).
func deleteAll(t *testing.T, project string, names []string) {
	t.Helper()
	ctx := context.Background()
	for _, n := range names {
		_ = cl.Delete(ctx, project, api.KindApp, n) // one already gone answers not found; the wait below checks
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, n := range names {
			p, err := cl.Placement(ctx, api.Key(project, api.KindApp, n))
			assert.NoError(c, err)
			assert.Nil(c, p, "placement of %s", n)
		}
	}, 60*time.Second, 250*time.Millisecond)
}

// TestReservedPreemptsTheFewestPreemptible fills the region with 30
// Preemptible Apps of one 3-CPU pod (10 per 32-CPU cluster; half of
// priority 0, half of priority 5), then submits a Reserved App of two
// such pods: it runs within 30 s, exactly two Preemptible Apps of the
// lowest priority are preempted, each with a `preempted` event naming
// the Reserved App, and their pods leave. Deleting the Reserved App lets
// the two run again without being submitted again.
func TestReservedPreemptsTheFewestPreemptible(t *testing.T) {
	e2e.Need(t)
	const project = "tiers-preempt"
	var fill []string
	for i := range 3 * nodesPerZone * 5 {
		name := fmt.Sprintf("fill-%02d", i)
		fill = append(fill, name)
		submit(t, appDoc(project, name, api.TierPreemptible, 1, "3", 5*(i%2), ""))
	}
	defer deleteAll(t, project, append(slices.Clone(fill), "urgent"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, n := range fill {
			assert.Equal(c, int32(1), readyPods(api.Key(project, api.KindApp, n)), "%s ready", n)
		}
	}, 120*time.Second, 500*time.Millisecond, "the region is full of Preemptible work")

	// Wait until the inventory counts every fill pod and the scheduler's
	// assumptions about the fill have given way to it (an inventory
	// computed past the assume grace, 5 s, set in TestMain), so that it
	// decides on the clusters as they are.
	settled := time.Now().Add(6 * time.Second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cs, err := cl.Clusters(context.Background())
		assert.NoError(c, err)
		var pods int64
		for _, ci := range cs {
			assert.True(c, ci.Updated.After(settled), "inventory of %s computed %s", ci.Name, ci.Updated)
			for _, p := range ci.Pools {
				pods += p.RequestedPods
			}
		}
		assert.GreaterOrEqual(c, pods, int64(len(fill)))
	}, 60*time.Second, 250*time.Millisecond, "the inventory counts the fill")
	// What Preemptible borrows, through the Compute API: all the fill
	// holds (its stored pods, 3 CPU and 256Mi plus the sidecars admission
	// injected), reclaimable.
	var fillDemand api.Demand
	for _, name := range fill {
		w, err := cl.Workload(context.Background(), api.Key(project, api.KindApp, name))
		require.NoError(t, err)
		d := api.DemandOf(w)
		fillDemand.MilliCPU, fillDemand.MemoryBytes, fillDemand.Pods = fillDemand.MilliCPU+d.MilliCPU, fillDemand.MemoryBytes+d.MemoryBytes, fillDemand.Pods+d.Pods
	}
	require.Equal(t, int64(len(fill)), fillDemand.Pods)
	borrowed := func(c *assert.CollectT, what string) {
		tq, err := apiQuotaTier(context.Background(), project, string(api.TierPreemptible))
		if !assert.NoError(c, err) {
			return
		}
		assert.Equal(c, fillDemand.MilliCPU, tq.Borrowed.MilliCPU, "%s: borrowed cpu", what)
		assert.Equal(c, fillDemand.MemoryBytes, tq.Borrowed.MemoryBytes, "%s: borrowed memory", what)
		assert.Equal(c, fillDemand.Pods, tq.Borrowed.Pods, "%s: borrowed pods", what)
		assert.True(c, tq.Reclaimable, "%s: reclaimable", what)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { borrowed(c, "the region full") }, 10*time.Second, 250*time.Millisecond)
	t.Logf("Preemptible borrows %d pods, %dm cpu, %d bytes of memory", fillDemand.Pods, fillDemand.MilliCPU, fillDemand.MemoryBytes)

	urgent := api.Key(project, api.KindApp, "urgent")
	start := time.Now()
	submit(t, appDoc(project, "urgent", api.TierReserved, 2, "3", 0, ""))
	if !assert.Eventually(t, func() bool { return readyPods(urgent) == 2 }, 30*time.Second, 100*time.Millisecond,
		"the Reserved App runs within 30 s") {
		dump(t, urgent)
		t.FailNow()
	}
	t.Logf("Reserved App of 2 pods Running %v after submission", time.Since(start).Round(time.Millisecond))

	var victims []string
	for _, n := range fill {
		if p := placement(t, api.Key(project, api.KindApp, n)); p != nil && p.PreemptedBy != "" {
			assert.Equal(t, urgent, p.PreemptedBy)
			assert.Empty(t, p.Shards)
			victims = append(victims, n)
		}
	}
	t.Logf("preempted: %v", victims)
	require.Len(t, victims, 2, "the fewest Preemptible replicas are preempted")
	for _, v := range victims {
		var i int
		_, err := fmt.Sscanf(v, "fill-%02d", &i)
		require.NoError(t, err)
		assert.Equal(t, 0, i%2, "%s is not of the lowest priority", v)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var named []string
		for _, ev := range eventsOf(t, project, api.EventPreempted) {
			assert.Contains(c, ev.Message, "preempted by "+urgent)
			named = append(named, ev.Name)
		}
		slices.Sort(named)
		assert.Equal(c, victims, named)
	}, 10*time.Second, 250*time.Millisecond, "one preempted event per victim, naming the Reserved App")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, v := range victims {
			assert.Zero(c, readyPods(api.Key(project, api.KindApp, v)), "%s still runs", v)
		}
	}, 30*time.Second, 250*time.Millisecond, "the victims' pods leave")
	// Through the Compute API, what `atoll describe` prints of a victim:
	// the queue it waits in, its position and who preempted it. The
	// victims keep their quota: Preemptible still borrows it all.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, v := range victims {
			w, err := apiApp(context.Background(), project, v)
			if !assert.NoError(c, err) {
				continue
			}
			assert.Equal(c, string(api.TierPreemptible), w.Status.Queue, "%s queue", v)
			assert.Positive(c, w.Status.Position, "%s position", v)
			assert.False(c, w.Status.QueuedAt.IsZero(), "%s queued at", v)
			assert.Equal(c, urgent, w.Status.PreemptedBy, "%s preempted by", v)
		}
		borrowed(c, "after the preemption")
	}, 10*time.Second, 250*time.Millisecond, "the victims' queue and preemptor through the API")
	for _, v := range victims {
		w, err := apiApp(context.Background(), project, v)
		require.NoError(t, err)
		t.Logf("%s: Queue: %s position %d (as of %s); Preempted by: %s", v, w.Status.Queue, w.Status.Position,
			w.Status.QueuedAt.Format(time.RFC3339Nano), w.Status.PreemptedBy)
	}

	// The Reserved App goes; the preempted Apps come back by themselves.
	uids := map[string]string{}
	for _, v := range victims {
		w, err := cl.Workload(context.Background(), api.Key(project, api.KindApp, v))
		require.NoError(t, err)
		uids[v] = w.Metadata.UID
	}
	back := time.Now()
	deleteAll(t, project, []string{"urgent"})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, v := range victims {
			assert.Equal(c, int32(1), readyPods(api.Key(project, api.KindApp, v)), "%s runs again", v)
		}
	}, 60*time.Second, 250*time.Millisecond, "the preempted Apps run again without resubmission")
	t.Logf("preempted Apps Running again %v after the Reserved App was deleted", time.Since(back).Round(time.Millisecond))
	for _, v := range victims {
		w, err := cl.Workload(context.Background(), api.Key(project, api.KindApp, v))
		require.NoError(t, err)
		assert.Equal(t, uids[v], w.Metadata.UID, "%s was submitted again", v)
	}
}

// TestReservedAheadOfAPreemptibleBurst: with the scheduler stopped, 500
// Preemptible Apps are submitted, then one Reserved App; when the
// scheduler comes back the Reserved App is decided before the
// Preemptible burst (the scheduled and unschedulable events' times). The
// Preemptible Apps ask for more CPU than a node has, so they wait and
// create nothing in the member clusters.
func TestReservedAheadOfAPreemptibleBurst(t *testing.T) {
	e2e.Need(t)
	const project = "tiers-burst"
	ctx := context.Background()
	require.NoError(t, reg.StopService(ctx, "scheduler"))
	restarted := false
	defer func() {
		if !restarted {
			require.NoError(t, reg.StartService(ctx, "scheduler"))
		}
	}()
	var burst []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range 500 {
		name := fmt.Sprintf("burst-%03d", i)
		burst = append(burst, name)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := cl.Submit(ctx, appDoc(project, name, api.TierPreemptible, 1, "20", 0, ""))
			mu.Lock()
			defer mu.Unlock()
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	submit(t, appDoc(project, "urgent", api.TierReserved, 1, "100m", 0, ""))
	defer deleteAll(t, project, append(slices.Clone(burst), "urgent"))

	require.NoError(t, reg.StartService(ctx, "scheduler"))
	restarted = true
	var decided []api.WorkloadEvent
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		decided = append(eventsOf(t, project, api.EventScheduled), eventsOf(t, project, api.EventUnschedulable)...)
		assert.GreaterOrEqual(c, len(decided), 501)
	}, 120*time.Second, 500*time.Millisecond, "every App decided")
	slices.SortStableFunc(decided, func(a, b api.WorkloadEvent) int { return a.Time.Compare(b.Time) })
	pos := slices.IndexFunc(decided, func(e api.WorkloadEvent) bool { return e.Name == "urgent" })
	require.GreaterOrEqual(t, pos, 0)
	assert.Equal(t, api.EventScheduled, decided[pos].Event)
	t.Logf("the Reserved App was decided %d of %d, %v before the last Preemptible one", pos+1, len(decided),
		decided[len(decided)-1].Time.Sub(decided[pos].Time).Round(time.Millisecond))
	// The scheduler's workers decide in parallel (and take turns at the
	// decision lock in no set order): the Reserved App may share the
	// first round with as many Preemptible ones, never wait behind the
	// burst.
	assert.Less(t, pos, scheduler.Workers+scheduler.ReplayWorkers, "the Reserved App waited behind the Preemptible burst")
	p := placement(t, api.Key(project, api.KindApp, "burst-499"))
	require.NotNil(t, p)
	assert.Equal(t, string(api.TierPreemptible), p.Queue)
	assert.Positive(t, p.Position)
	// What `atoll describe` shows of it: the queue and the position.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := cl.Status(ctx, api.Key(project, api.KindApp, "burst-499"))
		if !assert.NoError(c, err) || !assert.NotNil(c, st) {
			return
		}
		i := slices.IndexFunc(st.Conditions, func(c api.Condition) bool { return c.Type == "Queued" })
		if assert.GreaterOrEqual(c, i, 0, "conditions %+v", st.Conditions) {
			assert.Contains(c, st.Conditions[i].Message, "waiting in the Preemptible queue at position")
		}
	}, 30*time.Second, 250*time.Millisecond)
}

// TestBufferKeepsOnDemandOff sets a 95% burst buffer on zone a's cluster:
// an OnDemand App that may run anywhere goes to the other zones; one
// that may run only in zone a waits, saying why; a Reserved one in zone
// a runs there, in the buffer.
func TestBufferKeepsOnDemandOff(t *testing.T) {
	e2e.Need(t)
	const project = "tiers-buffer"
	ctx := context.Background()
	clusterA := ""
	for _, c := range reg.Env.Clusters {
		if c.Zone == "a" {
			clusterA = c.Name
		}
	}
	require.NotEmpty(t, clusterA)
	_, err := cl.SetClusterLabels(ctx, clusterA, map[string]string{api.LabelBufferPercent: "95"}, nil)
	require.NoError(t, err)
	defer func() {
		_, err := cl.SetClusterLabels(ctx, clusterA, nil, []string{api.LabelBufferPercent})
		assert.NoError(t, err)
	}()
	// The scheduler sees the label once the aggregator wrote it.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cs, err := cl.Clusters(ctx)
		assert.NoError(c, err)
		for _, ci := range cs {
			if ci.Name == clusterA {
				assert.Equal(c, "95", ci.Labels[api.LabelBufferPercent])
			}
		}
	}, 30*time.Second, 250*time.Millisecond)

	submit(t, appDoc(project, "anywhere", api.TierOnDemand, 3, "3", 0, ""))
	submit(t, appDoc(project, "only-a", api.TierOnDemand, 1, "3", 0, "a"))
	submit(t, appDoc(project, "reserved-a", api.TierReserved, 1, "3", 0, "a"))
	defer deleteAll(t, project, []string{"anywhere", "only-a", "reserved-a"})

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := cl.Placement(ctx, api.Key(project, api.KindApp, "anywhere"))
		if !assert.NoError(c, err) || !assert.NotNil(c, p) {
			return
		}
		var n int32
		for _, sh := range p.Shards {
			assert.NotEqual(c, clusterA, sh.Cluster, "an OnDemand shard in the buffer")
			n += sh.Replicas
		}
		assert.Equal(c, int32(3), n)
	}, 30*time.Second, 250*time.Millisecond, "the OnDemand App goes elsewhere")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := cl.Placement(ctx, api.Key(project, api.KindApp, "only-a"))
		if !assert.NoError(c, err) || !assert.NotNil(c, p) {
			return
		}
		assert.True(c, p.Unschedulable)
		assert.Equal(c, string(api.TierOnDemand), p.Queue)
		why := ""
		for _, r := range p.Reasons {
			if r.Cluster == clusterA {
				why += r.Reason
			}
		}
		assert.True(c, strings.Contains(why, "burst buffer"), "reasons for %s: %q", clusterA, why)
	}, 30*time.Second, 250*time.Millisecond, "the OnDemand App bound to zone a waits")
	require.Eventually(t, func() bool { return readyPods(api.Key(project, api.KindApp, "reserved-a")) == 1 }, 60*time.Second, 250*time.Millisecond,
		"the Reserved App runs in zone a's buffer")
	p := placement(t, api.Key(project, api.KindApp, "reserved-a"))
	require.NotNil(t, p)
	require.Len(t, p.Shards, 1)
	assert.Equal(t, clusterA, p.Shards[0].Cluster)
}

// dump logs a workload's placement and status and the clusters' inventory.
func dump(t *testing.T, key string) {
	t.Helper()
	ctx := context.Background()
	p, _ := cl.Placement(ctx, key)
	st, _ := cl.Status(ctx, key)
	pj, _ := json.Marshal(p)
	sj, _ := json.Marshal(st)
	t.Logf("placement of %s: %s", key, pj)
	t.Logf("status of %s: %s", key, sj)
	cs, _ := cl.Clusters(ctx)
	for _, c := range cs {
		cj, _ := json.Marshal(c.Pools)
		t.Logf("cluster %s updated %s: %s", c.Name, c.Updated.Format(time.RFC3339Nano), cj)
	}
}

// TestReservedPoolsPerTier gives zone a's cluster a Reserved pool (one
// 16-CPU node labelled atoll.dev/tier=Reserved and tainted so): a
// Reserved App there runs only on it, an OnDemand App only off it. It
// runs last: from then on Reserved work in zone a has only that pool.
func TestReservedPoolsPerTier(t *testing.T) {
	e2e.Need(t)
	const project = "tiers-pools"
	ctx := context.Background()
	var member *testenv.Cluster
	for _, c := range reg.Env.Clusters {
		if c.Zone == "a" {
			member = c
		}
	}
	require.NotNil(t, member)
	_, err := member.AddNodes(ctx, testenv.NodePool{Name: "reserved", Count: 1, CPU: "16", Memory: "64Gi", Tier: api.PoolTierReserved,
		Taints: []corev1.Taint{{Key: api.NodeLabelTier, Value: api.PoolTierReserved, Effect: corev1.TaintEffectNoSchedule}}})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cs, err := cl.Clusters(ctx)
		assert.NoError(c, err)
		for _, ci := range cs {
			if ci.Name == member.Name {
				assert.Equal(c, 1, ci.Pools["reserved"].ReadyNodes)
				assert.Equal(c, api.PoolTierReserved, ci.Pools["reserved"].Tier)
			}
		}
	}, 60*time.Second, 250*time.Millisecond, "the inventory shows the Reserved pool")

	submit(t, appDoc(project, "reserved", api.TierReserved, 3, "3", 0, "a"))
	submit(t, appDoc(project, "ondemand", api.TierOnDemand, 3, "3", 0, "a"))
	defer deleteAll(t, project, []string{"reserved", "ondemand"})
	for _, n := range []string{"reserved", "ondemand"} {
		require.Eventually(t, func() bool { return readyPods(api.Key(project, api.KindApp, n)) == 3 }, 60*time.Second, 250*time.Millisecond, "%s runs", n)
	}
	p := placement(t, api.Key(project, api.KindApp, "reserved"))
	require.Len(t, p.Shards, 1)
	assert.Equal(t, api.PoolTierReserved, p.Shards[0].PoolTier)
	p = placement(t, api.Key(project, api.KindApp, "ondemand"))
	require.Len(t, p.Shards, 1)
	assert.Equal(t, api.PoolTierShared, p.Shards[0].PoolTier)

	onReserved := func(name string) (yes, no int) {
		pods, err := member.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
		require.NoError(t, err)
		for _, p := range pods.Items {
			node, err := member.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			require.NoError(t, err)
			if node.Labels[api.NodeLabelTier] == api.PoolTierReserved {
				yes++
			} else {
				no++
			}
		}
		return yes, no
	}
	yes, no := onReserved("reserved")
	assert.Equal(t, [2]int{3, 0}, [2]int{yes, no}, "Reserved pods on / off the Reserved pool")
	yes, no = onReserved("ondemand")
	assert.Equal(t, [2]int{0, 3}, [2]int{yes, no}, "OnDemand pods on / off the Reserved pool")
}
