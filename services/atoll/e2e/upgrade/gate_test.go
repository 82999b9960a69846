package upgrade

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/upgrade"
	"atoll.dev/services/upgrade/plan"
)

func appIn(project, name string, replicas int, zone, availability string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"placement":{"zones":[%q]},"availability":%s,
"template":{"containers":[{"name":"web","image":"nginx","resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`,
		project, name, replicas, zone, availability))
}

func runIn(t *testing.T, project, name string, replicas int, zone, availability string) {
	t.Helper()
	ctx := context.Background()
	_, err := cl.Apply(ctx, appIn(project, name, replicas, zone, availability))
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := cl.Status(ctx, api.Key(project, api.KindApp, name))
		if !assert.NoError(ct, err) || !assert.NotNil(ct, st) {
			return
		}
		assert.Equal(ct, int32(replicas), st.Ready)
	}, 2*time.Minute, 250*time.Millisecond)
}

func abortPlan(t *testing.T, name string) {
	putJSON(t, upgrade.ControlKey(name), plan.Control{Abort: true, Reason: "test over"})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, plan.PhaseAborted, progressOf(ct, name).Phase)
	}, time.Minute, 250*time.Millisecond)
}

// TestGateBreachPausesCanary: in the canary cluster an App's new pods
// fail to appear (a ResourceQuota refuses them), so after a wave drains
// one of its pods the App stays below its desired count through the
// soak: the gate pauses the plan and the next cluster is never touched.
func TestGateBreachPausesCanary(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	canary, next := reg.Members[1], reg.Members[2]
	const proj = "fragile"
	runIn(t, proj, "fragile", 3, canary.Zone, `{"maxUnavailable":"1"}`)
	cc := reg.Env.Cluster(canary.Name)
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-new-pods", Namespace: api.Namespace(proj)},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}}}
	_, err := cc.Client.CoreV1().ResourceQuotas(q.Namespace).Create(ctx, q, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cc.Client.CoreV1().ResourceQuotas(q.Namespace).Delete(context.Background(), q.Name, metav1.DeleteOptions{})
	})
	nc := reg.Env.Cluster(next.Name)
	w := watchCordons(nc)
	spec := plan.Spec{Name: "gated", Target: plan.Target{Label: versionLabel, Value: "v4"},
		Soak: plan.Duration{Duration: 20 * time.Second}, DrainDeadline: plan.Duration{Duration: time.Minute},
		Clusters: []plan.ClusterStep{
			{Name: canary.Name, Pools: []plan.PoolStep{{Name: "general", MaxUnavailable: "1"}}},
			{Name: next.Name, Pools: []plan.PoolStep{{Name: "general", MaxUnavailable: "1"}}},
		}}
	putJSON(t, upgrade.SpecKey(spec.Name), spec)
	start := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := progressOf(ct, spec.Name)
		assert.Equal(ct, plan.PhasePaused, p.Phase)
		assert.Equal(ct, plan.ByGate, p.PausedBy)
	}, 4*time.Minute, 250*time.Millisecond)
	p := progressOf(t, spec.Name)
	t.Logf("paused after %v: %s", time.Since(start).Round(time.Second), p.Reason)
	require.Contains(t, p.Reason, "fragile")
	require.Equal(t, []string{canary.Name}, p.Touched)
	// Paused: the next cluster stays untouched (polled for a while: the
	// subject is that nothing happens).
	require.Never(t, func() bool { return len(progressOf(t, spec.Name).Touched) > 1 }, 5*time.Second, 250*time.Millisecond)
	require.Empty(t, w.end(), "no node of %s cordoned", next.Name)
	list, err := nc.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.LabelPool + "=general"})
	require.NoError(t, err)
	for _, n := range list.Items {
		require.NotEqual(t, "v4", n.Labels[versionLabel], n.Name)
	}
	abortPlan(t, spec.Name)
}

// TestDrainDeadlineSkip: a PodDisruptionBudget that blocks forever (an
// App of one replica with minAvailable 1) holds one node's drain; past
// the drain deadline the policy skip uncordons that node and leaves it on
// the old version, and the rest of the pool is rotated.
func TestDrainDeadlineSkip(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	m := reg.Members[2]
	const proj = "pinned"
	runIn(t, proj, "pinned", 1, m.Zone, `{"minAvailable":"1"}`)
	c := reg.Env.Cluster(m.Name)
	pods, err := c.Client.CoreV1().Pods(api.Namespace(proj)).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	host := pods.Items[0].Spec.NodeName
	spec := plan.Spec{Name: "skipping", Target: plan.Target{Label: versionLabel, Value: "v5"},
		Soak: plan.Duration{Duration: time.Second}, DrainDeadline: plan.Duration{Duration: 10 * time.Second}, DrainPolicy: plan.DrainSkip,
		Clusters: []plan.ClusterStep{{Name: m.Name, Pools: []plan.PoolStep{{Name: "general", MaxUnavailable: "1"}}}}}
	putJSON(t, upgrade.SpecKey(spec.Name), spec)
	start := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := progressOf(ct, spec.Name)
		assert.Equal(ct, plan.PhaseDone, p.Phase, "%s: %s", p.Phase, p.Reason)
	}, 5*time.Minute, time.Second)
	t.Logf("done in %v", time.Since(start).Round(time.Second))
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.LabelPool + "=general"})
	require.NoError(t, err)
	require.Len(t, list.Items, nodesPerZone)
	for _, n := range list.Items {
		require.False(t, n.Spec.Unschedulable, n.Name)
		if n.Name == host {
			require.NotEqual(t, "v5", n.Labels[versionLabel], "the blocked node stays on its version")
		} else {
			require.Equal(t, "v5", n.Labels[versionLabel], n.Name)
		}
	}
	var skipped *plan.Node
	for _, n := range progressOf(t, spec.Name).Nodes {
		if n.Name == host {
			skipped = n
		}
	}
	require.NotNil(t, skipped)
	require.Equal(t, plan.NodeSkipped, skipped.State)
	require.Contains(t, skipped.Why, "pinned")
	err = cl.Delete(ctx, proj, api.KindApp, "pinned")
	require.NoError(t, err)
}

// TestFrozenAPIServerPausesThePlan: the service reads a cluster's nodes
// and Pending pods from informers, which keep serving what they last saw
// when the API server stops answering. The gate must not take that for a
// healthy cluster: with the current cluster's kube-apiserver frozen
// (SIGSTOP) mid-plan, the plan pauses, by the gate, as unreachable.
func TestFrozenAPIServerPausesThePlan(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	m := reg.Members[0]
	c := reg.Env.Cluster(m.Name)
	const pool = "frozen"
	_, err := c.AddNodes(ctx, testenv.NodePool{Name: pool, Count: 3, CPU: "8", Memory: "32Gi"})
	require.NoError(t, err)
	spec := plan.Spec{Name: "frozen", Target: plan.Target{Label: versionLabel, Value: "frozen"},
		Soak: plan.Duration{Duration: 5 * time.Minute}, DrainDeadline: plan.Duration{Duration: time.Minute},
		Clusters: []plan.ClusterStep{{Name: m.Name, Pools: []plan.PoolStep{{Name: pool, MaxUnavailable: "1"}}}}}
	putJSON(t, upgrade.SpecKey(spec.Name), spec)
	t.Cleanup(func() {
		if ph := progressOf(t, spec.Name).Phase; ph != plan.PhaseAborted && ph != plan.PhaseDone {
			abortPlan(t, spec.Name)
		}
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := progressOf(ct, spec.Name)
		assert.Equal(ct, []string{m.Name}, p.Touched, "the first wave started")
	}, 2*time.Minute, 250*time.Millisecond)

	frozen, err := c.PauseComponent(testenv.KubeAPIServer)
	require.NoError(t, err)
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			require.NoError(t, frozen.Resume())
		}
	}
	t.Cleanup(resume)
	start := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := progressOf(ct, spec.Name)
		assert.Equal(ct, plan.PhasePaused, p.Phase)
		assert.Equal(ct, plan.ByGate, p.PausedBy)
	}, upgrade.GateGrace+time.Minute, 250*time.Millisecond)
	resume()
	p := progressOf(t, spec.Name)
	t.Logf("paused %v after the freeze: %s", time.Since(start).Round(time.Second), p.Reason)
	require.Contains(t, p.Reason, "unreachable")
}
