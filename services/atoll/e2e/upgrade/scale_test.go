package upgrade

import (
	"context"
	"fmt"
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

// The fleet of TestRotationAtScale: per member cluster, two pools of
// scalePool nodes (beside the region's own), rotated with percent-based
// waves, and an App of scaleReplicas pods with a budget of scaleBudget.
const (
	scalePool     = 50
	scaleReplicas = 30
	scaleBudget   = 3
)

// scalePools are the pools rotated and their waves: 10% unavailable with
// 10% surge (5 + 5 of 50), and 20% unavailable (10 of 50).
var scalePools = []plan.PoolStep{
	{Name: "scale-a", MaxUnavailable: "10%", MaxSurge: "10%"},
	{Name: "scale-b", MaxUnavailable: "20%"},
}

// poolSampler samples, every 200ms until stopped, each cluster's pools'
// shortfall (the pool's size less its Ready, schedulable nodes) and the
// fewest ready pods of each cluster's App.
type poolSampler struct {
	mu        sync.Mutex
	shortfall map[string]int // cluster/pool
	minReady  map[string]int // cluster
	samples   int
	stop      chan struct{}
	done      chan struct{}
}

func samplePools(clusters []*testenv.Cluster, apps map[string]string) *poolSampler {
	s := &poolSampler{shortfall: map[string]int{}, minReady: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, c := range clusters {
				for _, p := range scalePools {
					list, err := c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: testenv.LabelPool + "=" + p.Name})
					if err != nil {
						continue
					}
					up := 0
					for _, n := range list.Items {
						if isReady(n) && !n.Spec.Unschedulable && n.DeletionTimestamp == nil {
							up++
						}
					}
					s.mu.Lock()
					k := c.Name + "/" + p.Name
					s.shortfall[k] = max(s.shortfall[k], scalePool-up)
					s.mu.Unlock()
				}
				r, err := readyPods(c.Client, apps[c.Name])
				s.mu.Lock()
				s.samples++
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

func (s *poolSampler) end() {
	close(s.stop)
	<-s.done
}

// TestRotationAtScale: three member clusters of a hundred more KWOK nodes
// each, in two pools, rotated with percent-based waves and a short soak.
// Every node of both pools ends on the new version, no pool ever has more
// nodes out of service than its wave's max unavailable (sampled every
// 200ms), every App stays within its budget (sampled), and the workloads
// end where they started in count. It logs the duration and the rate.
func TestRotationAtScale(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	var clusters []*testenv.Cluster
	apps := map[string]string{}
	start := time.Now()
	for _, m := range reg.Members {
		c := reg.Env.Cluster(m.Name)
		require.NotNil(t, c)
		clusters = append(clusters, c)
		for _, p := range scalePools {
			_, err := c.AddNodes(ctx, testenv.NodePool{Name: p.Name, Count: scalePool, CPU: "8", Memory: "32Gi"})
			require.NoError(t, err)
		}
	}
	t.Logf("added %d nodes in %v", len(clusters)*len(scalePools)*scalePool, time.Since(start).Round(time.Millisecond))
	for i, m := range reg.Members {
		name := fmt.Sprintf("scale-%d", i)
		apps[m.Name] = name
		runIn(t, project, name, scaleReplicas, m.Zone, fmt.Sprintf(`{"maxUnavailable":"%d"}`, scaleBudget))
	}
	spec := plan.Spec{Name: "at-scale", Target: plan.Target{Label: versionLabel, Value: "scale"},
		Soak: plan.Duration{Duration: time.Second}, DrainDeadline: plan.Duration{Duration: time.Minute}}
	for _, m := range reg.Members {
		spec.Clusters = append(spec.Clusters, plan.ClusterStep{Name: m.Name, Pools: scalePools})
	}
	s := samplePools(clusters, apps)
	start = time.Now()
	putJSON(t, upgrade.SpecKey(spec.Name), spec)
	t.Cleanup(func() {
		// A plan that did not finish must not hold later plans.
		if progressOf(t, spec.Name).Phase != plan.PhaseDone {
			abortPlan(t, spec.Name)
		}
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := progressOf(ct, spec.Name)
		assert.Equal(ct, plan.PhaseDone, p.Phase, "%s: %s", p.Phase, p.Reason)
	}, 6*time.Minute, time.Second)
	took := time.Since(start)
	s.end()
	rotated := len(clusters) * len(scalePools) * scalePool
	t.Logf("rotated %d nodes in %v (%.0f nodes/minute); %d samples; shortfall %v; min ready %v",
		rotated, took.Round(time.Second), float64(rotated)/took.Minutes(), s.samples, s.shortfall, s.minReady)

	p := progressOf(t, spec.Name)
	done := 0
	for _, n := range p.Nodes {
		require.Equal(t, plan.NodeDone, n.State, "%s: %s", n.Name, n.Why)
		done++
	}
	require.Equal(t, rotated, done)
	for _, c := range clusters {
		for _, ps := range scalePools {
			list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.LabelPool + "=" + ps.Name})
			require.NoError(t, err)
			require.Len(t, list.Items, scalePool, "%s/%s ends with its size", c.Name, ps.Name)
			for _, n := range list.Items {
				require.Equal(t, "scale", n.Labels[versionLabel], n.Name)
				require.False(t, n.Spec.Unschedulable, "%s left cordoned", n.Name)
			}
			most, err := plan.MaxUnavailable(ps.MaxUnavailable, scalePool)
			require.NoError(t, err)
			require.LessOrEqual(t, s.shortfall[c.Name+"/"+ps.Name], most, "max unavailable of %s/%s", c.Name, ps.Name)
		}
		require.GreaterOrEqual(t, s.minReady[c.Name], scaleReplicas-scaleBudget, "App of %s within its budget", c.Name)
		require.Eventually(t, func() bool {
			n, err := readyPods(c.Client, apps[c.Name])
			return err == nil && n == scaleReplicas
		}, time.Minute, 250*time.Millisecond, "workloads back in count in %s", c.Name)
		st, err := cl.Status(ctx, api.Key(project, api.KindApp, apps[c.Name]))
		require.NoError(t, err)
		require.Equal(t, int32(scaleReplicas), st.Ready)
	}
}
