package upgrade

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/disruption"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	rem "atoll.dev/services/remediation"
	"atoll.dev/services/upgrade"
	"atoll.dev/services/upgrade/plan"
)

// remediationPolicy acts within seconds, with the cluster budget the
// plan shares.
func remediationPolicy(budget disruption.Budget) rem.Policy {
	s := rem.Steps{
		Conditions: []rem.Condition{{Type: corev1.NodeReady, Statuses: []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionUnknown}, For: rem.Duration(3 * time.Second)}},
		DrainRetry: rem.Duration(time.Second), DrainRetryMax: rem.Duration(4 * time.Second),
		DrainDeadline: rem.Duration(time.Minute), DrainPolicy: rem.DrainStop,
		PodGracePeriod: ptr.To(rem.Duration(time.Second)), SkipWaitForDelete: rem.Duration(3 * time.Second),
		ReplaceTimeout: rem.Duration(time.Minute), ReplaceAttempts: 2,
	}
	return rem.Policy{Steps: s, FlapTransitions: 4, FlapWindow: rem.Duration(time.Minute),
		MaxUnhealthy: "50%", Cooldown: rem.Duration(10 * time.Second),
		ActionEvery: rem.Duration(time.Second), ActionBurst: 1,
		Budget: budget, LeaseTTL: rem.Duration(2 * time.Minute)}
}

// breakNode makes a node report Ready=False while KWOK leaves it alone
// (testenv.BreakNode).
func breakNode(t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	require.NoError(t, testenv.BreakNode(context.Background(), cs, node))
}

// ledger samples a cluster's disruption ledger every 100ms: the owners
// seen per node UID and the most leases at once.
type ledger struct {
	mu       sync.Mutex
	owners   map[string]map[string]bool
	most     int
	stop     chan struct{}
	done     chan struct{}
	leasesBy map[string]int // leases seen per owner (at least once)
}

func watchLedger(t *testing.T, cluster string) *ledger {
	kv, err := reg.Bus.KV(context.Background(), bus.BucketDisruption)
	require.NoError(t, err)
	l := &ledger{owners: map[string]map[string]bool{}, leasesBy: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if e, err := kv.Get(context.Background(), disruption.Key(cluster)); err == nil {
				var rec disruption.Record
				if json.Unmarshal(e.Value(), &rec) == nil {
					l.mu.Lock()
					live := 0
					for uid, ls := range rec.Leases {
						if ls.Expires.Before(time.Now()) {
							continue
						}
						live++
						if l.owners[uid] == nil {
							l.owners[uid] = map[string]bool{}
						}
						if !l.owners[uid][ls.Owner] {
							l.leasesBy[ls.Owner]++
						}
						l.owners[uid][ls.Owner] = true
					}
					l.most = max(l.most, live)
					l.mu.Unlock()
				}
			}
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return l
}

func (l *ledger) end() {
	close(l.stop)
	<-l.done
}

// TestWithRemediation: remediation replaces a broken node while a plan
// (started once remediation holds that node) rotates the same cluster; one budget of two nodes is shared through
// the ledger: never more than two leases at once, and no node ever
// leased by both services.
func TestWithRemediation(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	m := reg.Members[0]
	c := reg.Env.Cluster(m.Name)
	budget := disruption.Budget{Pool: "2", Cluster: "2"}
	kv, err := reg.Bus.KV(ctx, bus.BucketRemediation)
	require.NoError(t, err)
	b, err := json.Marshal(remediationPolicy(budget))
	require.NoError(t, err)
	_, err = kv.Put(ctx, rem.KeyPolicy, b)
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Delete(context.Background(), rem.KeyPolicy) })

	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.LabelPool + "=general"})
	require.NoError(t, err)
	require.NotEmpty(t, list.Items)
	broken := list.Items[len(list.Items)-1].Name
	brokenUID := string(list.Items[len(list.Items)-1].UID)
	l := watchLedger(t, m.Name)
	breakNode(t, c.Client, broken)
	// The plan starts once remediation holds the broken node.
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.leasesBy[rem.Owner] > 0
	}, time.Minute, 100*time.Millisecond)
	spec := plan.Spec{Name: "shared", Target: plan.Target{Label: versionLabel, Value: "v6"},
		Soak: plan.Duration{Duration: time.Second}, DrainDeadline: plan.Duration{Duration: time.Minute},
		ClusterBudget: string(budget.Cluster),
		Clusters:      []plan.ClusterStep{{Name: m.Name, Pools: []plan.PoolStep{{Name: "general", MaxUnavailable: "2"}}}}}
	putJSON(t, upgrade.SpecKey(spec.Name), spec)
	start := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := progressOf(ct, spec.Name)
		assert.Equal(ct, plan.PhaseDone, p.Phase, "%s: %s", p.Phase, p.Reason)
		_, err := c.Client.CoreV1().Nodes().Get(ctx, broken, metav1.GetOptions{})
		assert.Error(ct, err, "the broken node is replaced")
	}, 5*time.Minute, time.Second)
	l.end()
	t.Logf("done in %v; most leases at once %d; leases by owner %v", time.Since(start).Round(time.Second), l.most, l.leasesBy)
	require.LessOrEqual(t, l.most, 2, "the shared cluster budget")
	require.Positive(t, l.leasesBy[upgrade.Owner])
	require.Positive(t, l.leasesBy[rem.Owner], "remediation acted too")
	// The ledger holds one lease per node UID, so no snapshot can show two
	// owners of a node; what matters is that the node remediation took was
	// never the plan's (a replacement remediation made may be rotated by
	// the plan once remediation is done with it).
	require.Equal(t, map[string]bool{rem.Owner: true}, l.owners[brokenUID], "the broken node stays remediation's")
	list, err = c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.LabelPool + "=general"})
	require.NoError(t, err)
	require.Len(t, list.Items, nodesPerZone)
	for _, n := range list.Items {
		require.Equal(t, "v6", n.Labels[versionLabel], n.Name)
		require.False(t, n.Spec.Unschedulable, n.Name)
	}
}
