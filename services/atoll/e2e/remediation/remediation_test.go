package remediation

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/disruption"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/admin"
	"atoll.dev/services/atoll/e2e"
	rem "atoll.dev/services/remediation"
)

// atoll runs atoll-admin in process against the region's NATS as the admin.
func atoll(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	root := admin.Root()
	root.SetArgs(append(args, "--nats", reg.Bus.ClientURL(), "--creds", reg.NATSAuth.CredentialsFile(bus.UserAdmin)))
	root.SetOut(&out)
	root.SetErr(&out)
	require.NoError(t, root.Execute(), out.String())
	return out.String()
}

// TestNotReadyNodeIsReplaced: a node NotReady past its duration is
// cordoned, drained with the App's budget honoured (its ready replicas
// never fall below replicas - maxUnavailable), replaced by a new node of
// its pool, and the App is whole again; the node's events arrive in order.
func TestNotReadyNodeIsReplaced(t *testing.T) {
	e2e.Need(t)
	setPolicy(t, basePolicy())
	const cluster, project, app = "zone-a", "rem-replace", "web"
	healAll(t, cluster)
	c := member(t, cluster)
	ctx := context.Background()
	runApp(t, appDoc(project, app, 4, "a", `{"maxUnavailable":"1"}`), api.Key(project, api.KindApp, app), 4)
	// The propagator made the shard's budget.
	pdb, err := c.Client.PolicyV1().PodDisruptionBudgets(api.Namespace(project)).Get(ctx, app, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "1", pdb.Spec.MaxUnavailable.String())

	var victim string
	for node := range podsOf(t, c.Client, project, app) {
		victim = node
		break
	}
	require.NotEmpty(t, victim)
	old, err := c.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	require.NoError(t, err)
	evs := watchEvents(t, cluster)
	stop := minReady(c.Client, project, app)
	start := time.Now()
	breakNode(t, c.Client, victim)

	want := []string{rem.EvUnhealthy, rem.EvCordoned, rem.EvDraining, rem.EvDrained, rem.EvReplacing, rem.EvReplaced}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, want, names(evs.of(victim)))
	}, 2*time.Minute, 200*time.Millisecond)
	took := time.Since(start)
	cordonedAt, _ := evs.has(victim, rem.EvCordoned)
	unhealthyAt, _ := evs.has(victim, rem.EvUnhealthy)
	require.GreaterOrEqual(t, cordonedAt.Time.Sub(unhealthyAt.Time), 3*time.Second, "cordoned before the condition's duration")

	// The old node is gone; one replacement, Ready, in the same pool.
	_, err = c.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	require.True(t, err != nil, "node %s still exists", victim)
	var repl []corev1.Node
	for _, n := range nodesOfPool(t, c.Client, "general") {
		if n.Labels[disruption.LabelReplaces] == victim {
			repl = append(repl, n)
		}
	}
	require.Len(t, repl, 1, "exactly one replacement")
	require.True(t, isReady(repl[0]))
	require.Equal(t, old.Labels[testenv.LabelZone], repl[0].Labels[testenv.LabelZone])
	require.Len(t, nodesOfPool(t, c.Client, "general"), nodesPerZone)

	// The App is whole again, none of it on the old node.
	runApp(t, appDoc(project, app, 4, "a", `{"maxUnavailable":"1"}`), api.Key(project, api.KindApp, app), 4)
	require.Empty(t, podsOf(t, c.Client, project, app)[victim])
	low := stop()
	require.GreaterOrEqual(t, low, 3, "ready replicas fell below replicas - maxUnavailable")
	t.Logf("NotReady -> replaced in %v; lowest ready replicas %d of 4 (budget: 3)", took.Round(100*time.Millisecond), low)
	require.NoError(t, cl.Delete(ctx, project, api.KindApp, app))
}

// TestRecoveryMidEscalationStopsIt: a node that recovers while cordoned
// is uncordoned and never drained.
func TestRecoveryMidEscalationStopsIt(t *testing.T) {
	e2e.Need(t)
	p := basePolicy()
	p.DrainAfter = rem.Duration(30 * time.Second)
	setPolicy(t, p)
	const cluster = "zone-a"
	healAll(t, cluster)
	c := member(t, cluster)
	victim := nodesOfPool(t, c.Client, "general")[0].Name
	evs := watchEvents(t, cluster)
	breakNode(t, c.Client, victim)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, ok := evs.has(victim, rem.EvCordoned)
		assert.True(ct, ok)
	}, time.Minute, 200*time.Millisecond)
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), victim, metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, n.Spec.Unschedulable)

	healNode(t, c.Client, victim)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, []string{rem.EvUnhealthy, rem.EvCordoned, rem.EvRecovered, rem.EvUncordoned}, names(evs.of(victim)))
		n, err := c.Client.CoreV1().Nodes().Get(context.Background(), victim, metav1.GetOptions{})
		if assert.NoError(ct, err) {
			assert.False(ct, n.Spec.Unschedulable)
		}
	}, 30*time.Second, 200*time.Millisecond)
	st, ok := nodeState(status(t, cluster), victim)
	require.True(t, ok)
	require.Equal(t, rem.PhaseHealthy, st.Phase)
}

// TestFlappingNodeIsNeverRemediated: a node whose Ready flips every two
// seconds is marked flapping and, even once it stays NotReady past the
// duration, never cordoned while the flap window lasts.
func TestFlappingNodeIsNeverRemediated(t *testing.T) {
	e2e.Need(t)
	setPolicy(t, basePolicy())
	const cluster = "zone-c"
	healAll(t, cluster)
	c := member(t, cluster)
	victim := nodesOfPool(t, c.Client, "general")[1].Name
	evs := watchEvents(t, cluster)
	for range 3 {
		breakNode(t, c.Client, victim)
		time.Sleep(2 * time.Second) // the flapping is the subject
		healNode(t, c.Client, victim)
		time.Sleep(2 * time.Second)
	}
	breakNode(t, c.Client, victim)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, ok := evs.has(victim, rem.EvFlapping)
		assert.True(ct, ok)
	}, 30*time.Second, 200*time.Millisecond)
	// NotReady for five times its duration: still not acted on.
	time.Sleep(15 * time.Second) // waiting out the duration is the subject
	_, cordoned := evs.has(victim, rem.EvCordoned)
	require.False(t, cordoned, "a flapping node was cordoned: %v", names(evs.of(victim)))
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), victim, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, n.Spec.Unschedulable)
	st, ok := nodeState(status(t, cluster), victim)
	require.True(t, ok)
	require.True(t, st.Flapping)
	require.Contains(t, st.Waiting, "flapping")
	t.Logf("flapping node: events %v; waiting %q", names(evs.of(victim)), st.Waiting)
}

// TestZoneStormOpensTheBreaker: 40% of a cluster's nodes go NotReady at
// once: the breaker opens (visible in the status) and nothing is done;
// when one recovers, the straggler waits out the cooldown and is then
// remediated.
func TestZoneStormOpensTheBreaker(t *testing.T) {
	e2e.Need(t)
	setPolicy(t, basePolicy())
	const cluster = "zone-b"
	healAll(t, cluster)
	c := member(t, cluster)
	nodes := nodesOfPool(t, c.Client, "general")
	a, b := nodes[0].Name, nodes[1].Name
	evs := watchEvents(t, cluster)
	breakNode(t, c.Client, a)
	breakNode(t, c.Client, b)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st := status(ct, cluster)
		open := 0
		for _, br := range st.Breakers {
			if br.Open && br.Unhealthy == 2 {
				open++
			}
		}
		assert.Equal(ct, 3, open, "breakers of pool, cluster and zone open: %+v", st.Breakers)
	}, 30*time.Second, 200*time.Millisecond)
	out := atoll(t, "remediation", "status", "--cluster", cluster)
	require.Contains(t, out, "breaker cluster/zone-b OPEN: 2 of 5 unhealthy, at most 1")
	t.Logf("atoll-admin remediation status during the storm:\n%s", out)
	// And on the holder's /metrics.
	holder, err := reg.LeaseHolder(context.Background(), rem.ClusterLease(cluster))
	require.NoError(t, err)
	resp, err := http.Get(reg.AdminURL("remediation", holder) + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Contains(t, string(body), `atoll_remediation_breaker_open{cluster="zone-b",domain="cluster/zone-b",service="remediation"} 1`)
	// Three times the duration: no action.
	time.Sleep(10 * time.Second) // the storm lasting is the subject
	for _, n := range []string{a, b} {
		_, cordoned := evs.has(n, rem.EvCordoned)
		require.False(t, cordoned, "%s acted on during a storm: %v", n, names(evs.of(n)))
		st, _ := nodeState(status(t, cluster), n)
		require.Contains(t, st.Waiting, "storm breaker")
	}
	recovered := time.Now()
	healNode(t, c.Client, a)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, []string{rem.EvUnhealthy, rem.EvCordoned, rem.EvDraining, rem.EvDrained, rem.EvReplacing, rem.EvReplaced}, names(evs.of(b)))
	}, 2*time.Minute, 200*time.Millisecond)
	cordoned, _ := evs.has(b, rem.EvCordoned)
	wait := cordoned.Time.Sub(recovered)
	require.GreaterOrEqual(t, wait, 10*time.Second, "the straggler was acted on before the cooldown")
	_, touched := evs.has(a, rem.EvCordoned)
	require.False(t, touched)
	t.Logf("storm: breaker open with 2 of %d NotReady; straggler cordoned %v after the recovery (cooldown 10s)", nodesPerZone, wait.Round(100*time.Millisecond))
}

// TestBlockingBudgetHitsTheDeadline: an App whose budget never allows an
// eviction (minAvailable 100%): the drain retries with backoff until its
// deadline, then the stop policy leaves the node cordoned and needing a
// human, the budget named in its status.
func TestBlockingBudgetHitsTheDeadline(t *testing.T) {
	e2e.Need(t)
	p := basePolicy()
	p.DrainDeadline = rem.Duration(15 * time.Second)
	setPolicy(t, p)
	const cluster, project, app = "zone-a", "rem-locked", "locked"
	healAll(t, cluster)
	c := member(t, cluster)
	ctx := context.Background()
	runApp(t, appDoc(project, app, 2, "a", `{"minAvailable":"100%"}`), api.Key(project, api.KindApp, app), 2)
	var victim string
	for node := range podsOf(t, c.Client, project, app) {
		victim = node
		break
	}
	evs := watchEvents(t, cluster)
	setCondition(t, c.Client, victim, "KernelDeadlock", corev1.ConditionTrue)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, ok := evs.has(victim, rem.EvNeedsHuman)
		assert.True(ct, ok, "events %v", names(evs.of(victim)))
	}, 90*time.Second, 200*time.Millisecond)
	st, ok := nodeState(status(t, cluster), victim)
	require.True(t, ok)
	require.Equal(t, rem.PhaseNeedsHuman, st.Phase)
	pdb := api.Namespace(project) + "/" + app
	require.NotEmpty(t, st.Drain.Blocked)
	require.Equal(t, pdb, st.Drain.Blocked[0].PDB)
	last := st.History[len(st.History)-1]
	require.Contains(t, last.Message, "PodDisruptionBudget "+pdb)
	require.GreaterOrEqual(t, st.Drain.Passes, 3, "retried with backoff")
	require.Empty(t, st.Drain.Evicted)
	n, err := c.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, n.Spec.Unschedulable, "stop policy: left cordoned")
	require.Len(t, podsOf(t, c.Client, project, app)[victim], 1, "the protected pod stays")
	t.Logf("blocked drain: %d passes, then %q", st.Drain.Passes, last.Message)
	require.NoError(t, cl.Delete(ctx, project, api.KindApp, app))
}

// TestLeaderKilledMidDrain: the holder of a cluster's lease is killed
// while a drain is blocked; the standby takes over, and once the budget
// allows it, finishes the drain and the replacement: every pod evicted
// once, one replacement node.
func TestLeaderKilledMidDrain(t *testing.T) {
	e2e.Need(t)
	setPolicy(t, basePolicy())
	const cluster, project, app = "zone-b", "rem-kill", "web"
	healAll(t, cluster)
	c := member(t, cluster)
	ctx := context.Background()
	key := api.Key(project, api.KindApp, app)
	runApp(t, appDoc(project, app, 3, "b", `{"minAvailable":"100%"}`), key, 3)
	var victim string
	for node := range podsOf(t, c.Client, project, app) {
		victim = node
		break
	}
	evs := watchEvents(t, cluster)
	setCondition(t, c.Client, victim, "KernelDeadlock", corev1.ConditionTrue)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, ok := evs.has(victim, rem.EvDrainBlocked)
		assert.True(ct, ok, "events %v", names(evs.of(victim)))
	}, time.Minute, 200*time.Millisecond)
	lease := rem.ClusterLease(cluster)
	holder, err := reg.LeaseHolder(ctx, lease)
	require.NoError(t, err)
	require.NoError(t, reg.Kill("remediation", holder))
	t.Cleanup(func() { _ = reg.StartReplica(context.Background(), "remediation", holder) })
	killed := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		h, err := reg.LeaseHolder(ctx, lease)
		assert.NoError(ct, err)
		assert.NotEqual(ct, holder, h)
	}, 30*time.Second, 100*time.Millisecond)
	takeover := time.Since(killed)
	// Let the budget allow evictions again: the standby finishes.
	runApp(t, appDoc(project, app, 3, "b", `{"maxUnavailable":"1"}`), key, 3)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, ok := evs.has(victim, rem.EvReplaced)
		assert.True(ct, ok, "events %v", names(evs.of(victim)))
	}, 2*time.Minute, 200*time.Millisecond)
	var count = map[string]int{}
	for _, ev := range evs.of(victim) {
		count[ev.Event]++
	}
	require.Equal(t, 1, count[rem.EvCordoned])
	require.Equal(t, 1, count[rem.EvReplacing])
	require.Equal(t, 1, count[rem.EvReplaced])
	var repl int
	for _, n := range nodesOfPool(t, c.Client, "general") {
		if n.Labels[disruption.LabelReplaces] == victim {
			repl++
		}
	}
	require.Equal(t, 1, repl, "exactly one replacement")
	// Every pod evicted once (the state records each eviction).
	require.NotContains(t, names(evs.of(victim)), rem.EvRecovered)
	n, ok := nodeState(status(t, cluster), victim)
	require.True(t, ok)
	require.Equal(t, rem.PhaseReplaced, n.Phase)
	seen := map[string]bool{}
	for _, p := range n.Drain.Evicted {
		require.False(t, seen[p.UID], "pod %s evicted twice", p.Name)
		seen[p.UID] = true
	}
	require.NotEmpty(t, seen)
	require.Empty(t, podsOf(t, c.Client, project, app)[victim])
	t.Logf("takeover in %v; %d pods evicted once each; events %v", takeover.Round(100*time.Millisecond), len(seen), names(evs.of(victim)))
	require.NoError(t, cl.Delete(ctx, project, api.KindApp, app))
}

// TestFrozenAPIServerTakesNoAction: a member's API server frozen for a
// minute: the service reads the cluster as unreachable, not its nodes as
// unhealthy, and takes no action on any of them. A node that went
// NotReady just before the freeze is acted on only its duration after
// the watch came back: the time the service could not see does not count.
func TestFrozenAPIServerTakesNoAction(t *testing.T) {
	e2e.Need(t)
	setPolicy(t, basePolicy())
	const cluster = "zone-c"
	healAll(t, cluster)
	c := member(t, cluster)
	evs := watchEvents(t, cluster)
	victim := nodesOfPool(t, c.Client, "general")[3].Name
	breakNode(t, c.Client, victim)
	p, err := c.PauseComponent("kube-apiserver")
	require.NoError(t, err)
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = p.Resume()
		}
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.False(ct, status(ct, cluster).Reachable)
	}, 30*time.Second, 500*time.Millisecond)
	time.Sleep(50 * time.Second) // the outage lasting is the subject
	for _, n := range []string{victim} {
		_, cordoned := evs.has(n, rem.EvCordoned)
		require.False(t, cordoned, "acted on %s during the outage", n)
	}
	require.NoError(t, p.Resume())
	resumed = true
	back := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, ok := evs.has(victim, rem.EvCordoned)
		assert.True(ct, ok)
	}, time.Minute, 200*time.Millisecond)
	cordoned, _ := evs.has(victim, rem.EvCordoned)
	unhealthyAt, _ := evs.has(victim, rem.EvUnhealthy)
	require.GreaterOrEqual(t, cordoned.Time.Sub(back), 3*time.Second, "acted on before the condition's duration after the outage")
	// The rest of the cluster, through the outage and its aftermath
	// (the node lifecycle controller's own reaction): no action.
	time.Sleep(10 * time.Second) // the aftermath is the subject
	require.True(t, status(t, cluster).Reachable)
	var others int
	for _, n := range nodesOfPool(t, c.Client, "general") {
		if n.Name == victim || n.Labels[disruption.LabelReplaces] == victim {
			continue
		}
		others++
		_, cordoned := evs.has(n.Name, rem.EvCordoned)
		require.False(t, cordoned, "%s acted on: %v", n.Name, names(evs.of(n.Name)))
		require.False(t, n.Spec.Unschedulable, n.Name)
	}
	t.Logf("frozen API server 50s+: %d other nodes untouched; the node NotReady since %s was cordoned %v after the API server came back (duration 3s)",
		others, unhealthyAt.Time.Format(time.TimeOnly), cordoned.Time.Sub(back).Round(100*time.Millisecond))
}

// TestPauseAndResume: `atoll-admin remediation pause` holds new actions in a
// cluster (the node waits, saying why); resume lets the escalation start.
func TestPauseAndResume(t *testing.T) {
	e2e.Need(t)
	setPolicy(t, basePolicy())
	const cluster = "zone-c"
	healAll(t, cluster)
	c := member(t, cluster)
	require.Contains(t, atoll(t, "remediation", "pause", "--cluster", cluster, "--reason", "maintenance"), "paused in cluster zone-c")
	t.Cleanup(func() { atoll(t, "remediation", "resume", "--cluster", cluster) })
	victim := nodesOfPool(t, c.Client, "general")[2].Name
	evs := watchEvents(t, cluster)
	breakNode(t, c.Client, victim)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, ok := nodeState(status(ct, cluster), victim)
		assert.True(ct, ok)
		assert.Equal(ct, "paused (cluster): maintenance", st.Waiting)
	}, 30*time.Second, 200*time.Millisecond)
	time.Sleep(5 * time.Second) // the pause holding is the subject
	_, cordoned := evs.has(victim, rem.EvCordoned)
	require.False(t, cordoned)
	require.Contains(t, atoll(t, "remediation", "resume", "--cluster", cluster), "resumed in cluster zone-c")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, ok := evs.has(victim, rem.EvCordoned)
		assert.True(ct, ok)
	}, 30*time.Second, 200*time.Millisecond)
	require.Contains(t, atoll(t, "remediation", "status", "--cluster", cluster), victim)
}
