package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/upgrade"
	"atoll.dev/services/upgrade/plan"
)

const (
	versionLabel = "atoll.dev/node-version"
	project      = "rotation"
)

func appDoc(name string, replicas int, zone string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"placement":{"zones":[%q]},"availability":{"maxUnavailable":"1"},
"template":{"containers":[{"name":"web","image":"nginx","resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`,
		project, name, replicas, zone))
}

// runApp submits an App and waits until all its replicas are ready.
func runApp(t *testing.T, doc []byte, key string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	_, err := cl.Apply(ctx, doc)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := cl.Status(ctx, key)
		if !assert.NoError(ct, err) || !assert.NotNil(ct, st) {
			return
		}
		assert.Equal(ct, api.PhaseRunning, st.Phase)
		assert.Equal(ct, replicas, st.Ready)
	}, 2*time.Minute, 250*time.Millisecond)
}

func readyPods(cs kubernetes.Interface, name string) (int, error) {
	list, err := cs.CoreV1().Pods(api.Namespace(project)).List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n, nil
}

func isReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sampler samples, every 100ms until stopped, each cluster's shortfall
// in its general pool (nodesPerZone less its Ready, schedulable nodes),
// the fewest ready pods of each cluster's App and when each cluster first
// had a node cordoned.
type sampler struct {
	mu        sync.Mutex
	shortfall map[string]int
	minReady  map[string]int
	firstCut  map[string]time.Time
	samples   int
	stop      chan struct{}
	done      chan struct{}
}

func sample(clusters []*testenv.Cluster, apps map[string]string) *sampler {
	s := &sampler{shortfall: map[string]int{}, minReady: map[string]int{}, firstCut: map[string]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, c := range clusters {
				list, err := c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: testenv.LabelPool + "=general"})
				if err != nil {
					continue
				}
				up, cut := 0, false
				for _, n := range list.Items {
					if isReady(n) && !n.Spec.Unschedulable {
						up++
					}
					cut = cut || n.Spec.Unschedulable
				}
				r, err := readyPods(c.Client, apps[c.Name])
				s.mu.Lock()
				s.samples++
				s.shortfall[c.Name] = max(s.shortfall[c.Name], nodesPerZone-up)
				if _, ok := s.firstCut[c.Name]; cut && !ok {
					s.firstCut[c.Name] = time.Now()
				}
				if m, ok := s.minReady[c.Name]; err == nil && (!ok || r < m) {
					s.minReady[c.Name] = r
				}
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *sampler) end() {
	close(s.stop)
	<-s.done
}

func putJSON(t *testing.T, key string, v any) {
	t.Helper()
	ctx := context.Background()
	kv, err := reg.Bus.KV(ctx, bus.BucketUpgrade)
	require.NoError(t, err)
	b, err := json.Marshal(v)
	require.NoError(t, err)
	_, err = kv.Put(ctx, key, b)
	require.NoError(t, err)
}

func progressOf(t require.TestingT, name string) plan.Progress {
	ctx := context.Background()
	kv, err := reg.Bus.KV(ctx, bus.BucketUpgrade)
	require.NoError(t, err)
	var p plan.Progress
	e, err := kv.Get(ctx, upgrade.ProgressKey(name))
	if err != nil {
		return p
	}
	b, err := bus.Inflate(e.Value())
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &p))
	return p
}

// TestRotation: a plan rotates every node of the three clusters to the
// new version label, the canary cluster first, one node at a time per
// pool (max unavailable 1, sampled every 100ms), every App staying within
// its budget (max unavailable 1 of 3, sampled), and the workloads end
// where they started in count.
func TestRotation(t *testing.T) {
	e2e.Need(t)
	var clusters []*testenv.Cluster
	var order []string
	apps := map[string]string{}
	for i, m := range reg.Members {
		c := reg.Env.Cluster(m.Name)
		require.NotNil(t, c)
		clusters = append(clusters, c)
		name := fmt.Sprintf("web-%d", i)
		apps[m.Name] = name
		runApp(t, appDoc(name, 3, m.Zone), api.Key(project, api.KindApp, name), 3)
	}
	// The canary is the last cluster of the region: the plan's order, not
	// the region's, decides.
	for i := len(reg.Members) - 1; i >= 0; i-- {
		order = append(order, reg.Members[i].Name)
	}
	spec := plan.Spec{Name: "v2", Target: plan.Target{Label: versionLabel, Value: "v2"},
		Soak: plan.Duration{Duration: 3 * time.Second}, DrainDeadline: plan.Duration{Duration: time.Minute}}
	for _, c := range order {
		spec.Clusters = append(spec.Clusters, plan.ClusterStep{Name: c, Pools: []plan.PoolStep{{Name: "general", MaxUnavailable: "1"}}})
	}
	s := sample(clusters, apps)
	start := time.Now()
	putJSON(t, upgrade.SpecKey(spec.Name), spec)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := progressOf(ct, spec.Name)
		assert.Equal(ct, plan.PhaseDone, p.Phase, "%s: %s", p.Phase, p.Reason)
	}, 8*time.Minute, time.Second)
	s.end()
	t.Logf("rotated %d nodes in %v; %d samples; shortfall %v; min ready %v", len(clusters)*nodesPerZone,
		time.Since(start).Round(time.Second), s.samples, s.shortfall, s.minReady)

	for _, c := range clusters {
		list, err := c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: testenv.LabelPool + "=general"})
		require.NoError(t, err)
		require.Len(t, list.Items, nodesPerZone, c.Name)
		for _, n := range list.Items {
			require.Equal(t, "v2", n.Labels[versionLabel], n.Name)
			require.False(t, n.Spec.Unschedulable, "%s left cordoned", n.Name)
		}
		require.LessOrEqual(t, s.shortfall[c.Name], 1, "max unavailable 1 in %s", c.Name)
		require.GreaterOrEqual(t, s.minReady[c.Name], 2, "App of %s within its budget", c.Name)
		require.Eventually(t, func() bool {
			n, err := readyPods(c.Client, apps[c.Name])
			return err == nil && n == 3
		}, time.Minute, 250*time.Millisecond, "workloads back in count in %s", c.Name)
	}
	for i := 1; i < len(order); i++ {
		require.True(t, s.firstCut[order[i-1]].Before(s.firstCut[order[i]]), "cluster %s before %s", order[i-1], order[i])
	}
	p := progressOf(t, spec.Name)
	require.Equal(t, order, p.Touched)
	for _, n := range p.Nodes {
		require.Equal(t, plan.NodeDone, n.State, n.Name)
	}
}
