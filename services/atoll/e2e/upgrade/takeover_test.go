package upgrade

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/upgrade"
	"atoll.dev/services/upgrade/plan"
)

// cordons counts, per node UID, the times a node went from schedulable
// to cordoned (sampled every 100ms; a cordon lasts seconds).
type cordons struct {
	mu    sync.Mutex
	count map[string]int
	names map[string]string
	stop  chan struct{}
	done  chan struct{}
}

func watchCordons(c *testenv.Cluster) *cordons {
	w := &cordons{count: map[string]int{}, names: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	last := map[string]bool{}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if list, err := c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err == nil {
				w.mu.Lock()
				for _, n := range list.Items {
					uid := string(n.UID)
					if n.Spec.Unschedulable && !last[uid] {
						w.count[uid]++
						w.names[uid] = n.Name
					}
					last[uid] = n.Spec.Unschedulable
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *cordons) end() map[string]int {
	close(w.stop)
	<-w.done
	return w.count
}

// TestLeaderKillPauseResume: the upgrade leader is killed mid-wave with
// nodes in flight (cordoned, one draining while its App's budget holds
// the other back), and a pause is written while no replica leads. The
// standby takes over: the pause holds (no node starts), the nodes in
// flight finish and none stays cordoned; on resume the plan finishes,
// with no node cordoned twice.
func TestLeaderKillPauseResume(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	m := reg.Members[0]
	c := reg.Env.Cluster(m.Name)
	require.NotNil(t, c)
	runApp(t, appDoc("held", 3, m.Zone), api.Key(project, api.KindApp, "held"), 3)
	w := watchCordons(c)
	spec := plan.Spec{Name: "takeover", Target: plan.Target{Label: versionLabel, Value: "v3"},
		Soak: plan.Duration{Duration: 2 * time.Second}, DrainDeadline: plan.Duration{Duration: 2 * time.Minute},
		Clusters: []plan.ClusterStep{{Name: m.Name, Pools: []plan.PoolStep{{Name: "general", MaxUnavailable: "2"}}}}}
	putJSON(t, upgrade.SpecKey(spec.Name), spec)

	// Mid-wave: two nodes past their cordon, one of them mid-drain (the
	// App's budget lets one of its pods go at a time).
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := progressOf(ct, spec.Name)
		past, draining := 0, 0
		for _, n := range p.InFlight() {
			if n.State == plan.NodeCordoned || n.State == plan.NodeDraining {
				past++
			}
			if n.State == plan.NodeDraining {
				draining++
			}
		}
		assert.GreaterOrEqual(ct, past, 2)
		assert.Positive(ct, draining)
	}, 2*time.Minute, 20*time.Millisecond)
	leader, err := reg.LeaseHolder(ctx, upgrade.LeaseName)
	require.NoError(t, err)
	require.NoError(t, reg.Kill("upgrade", leader))
	t.Cleanup(func() { _ = reg.StartReplica(context.Background(), "upgrade", leader) })
	before := progressOf(t, spec.Name)
	states := map[plan.NodeState]int{}
	for _, n := range before.Nodes {
		states[n.State]++
	}
	t.Logf("killed leader replica %d with nodes %v", leader, states)
	putJSON(t, upgrade.ControlKey(spec.Name), plan.Control{Pause: true, Reason: "given while the leader was down"})
	started := func(p plan.Progress) int {
		n := 0
		for _, x := range p.Nodes {
			if x.State.Started() {
				n++
			}
		}
		return n
	}

	// The standby takes over, honours the pause and finishes what started.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := progressOf(ct, spec.Name)
		assert.Equal(ct, plan.PhasePaused, p.Phase)
		assert.Empty(ct, p.InFlight())
	}, 3*time.Minute, 250*time.Millisecond)
	paused := progressOf(t, spec.Name)
	require.Contains(t, paused.Reason, "while the leader was down")
	require.Equal(t, started(before), started(paused), "no node started while paused")
	holder, err := reg.LeaseHolder(ctx, upgrade.LeaseName)
	require.NoError(t, err)
	require.NotEqual(t, leader, holder, "the standby leads")
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range list.Items {
		require.False(t, n.Spec.Unschedulable, "%s cordoned while the plan is paused", n.Name)
	}
	// A paused plan stays paused (polled for a while: the subject is
	// that nothing happens).
	require.Never(t, func() bool { return started(progressOf(t, spec.Name)) > started(paused) }, 5*time.Second, 250*time.Millisecond)

	putJSON(t, upgrade.ControlKey(spec.Name), plan.Control{ResumeSeq: 1})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := progressOf(ct, spec.Name)
		assert.Equal(ct, plan.PhaseDone, p.Phase, "%s: %s", p.Phase, p.Reason)
	}, 5*time.Minute, time.Second)
	counts := w.end()
	require.NotEmpty(t, counts)
	for uid, n := range counts {
		require.Equal(t, 1, n, "node %s cordoned %d times", w.names[uid], n)
	}
	list, err = c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.LabelPool + "=general"})
	require.NoError(t, err)
	for _, n := range list.Items {
		require.Equal(t, "v3", n.Labels[versionLabel], n.Name)
		require.False(t, n.Spec.Unschedulable, n.Name)
	}
	// Every pod evicted once: the plan's records hold no UID twice.
	seen := map[string]bool{}
	for _, n := range progressOf(t, spec.Name).Nodes {
		for _, uid := range n.Evicted {
			require.False(t, seen[uid], "pod %s evicted twice", uid)
			seen[uid] = true
		}
	}
}
