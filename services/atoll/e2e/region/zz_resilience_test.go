package region_test

// The tests here disturb the region (a frozen member cluster, restarted
// services); the file sorts last so the others run on a calm region.

import (
	"context"
	"errors"
	"fmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
)

// timeToRunning submits a 2-replica App allowed in zones a and b and
// returns how long it took to be Running.
func timeToRunning(t *testing.T, project, name string) time.Duration {
	t.Helper()
	ctx := context.Background()
	doc := []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":2,"placement":{"zones":["a","b"]},"template":{"containers":[{"name":"a","image":"nginx","resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`, project, name))
	start := time.Now()
	if _, err := cl.Submit(ctx, doc); err != nil {
		t.Fatal(err)
	}
	waitZones(t, api.Key(project, api.KindApp, name), map[string]int32{"a": 1, "b": 1}, "")
	return time.Since(start)
}

func TestFrozenClusterShardsMoveAndOthersAreNotSlowed(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project = "failover"
	key := api.Key(project, api.KindApp, "api")
	if _, err := cl.Submit(ctx, appDoc(project, "api", 9, "nginx:1.27")); err != nil {
		t.Fatal(err)
	}
	waitZones(t, key, map[string]int32{"a": 3, "b": 3, "c": 3}, "")
	before := timeToRunning(t, project, "probe-before")

	zc := reg.Env.Cluster("zone-c")
	paused, err := zc.PauseComponent(testenv.KubeAPIServer)
	if err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = paused.Resume()
		}
	}()
	frozeAt := time.Now()
	// The shards leave zone-c: all 9 replicas run in zones a and b.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, func() error {
			p, err := cl.Placement(ctx, key)
			if err != nil || p == nil {
				return fmt.Errorf("placement: %w", err)
			}
			var inC, total int32
			for _, sh := range p.Shards {
				total += sh.Replicas
				if sh.Cluster == "zone-c" {
					inC += sh.Replicas
				}
			}
			if inC > 0 || total != 9 {
				return fmt.Errorf("shards %+v", p.Shards)
			}
			st, err := cl.Status(ctx, key)
			if err != nil || st == nil || st.Phase != api.PhaseRunning || st.Ready != 9 {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		}())
	}, 60*time.Second, 250*time.Millisecond)
	moved := time.Since(frozeAt)
	t.Logf("zone-c frozen: 9 replicas Running in zones a and b %v later", moved.Round(time.Millisecond))
	if moved > 60*time.Second {
		t.Errorf("shards moved after %v, want within 60s", moved)
	}
	// Work in the healthy clusters goes on at its usual pace.
	during := timeToRunning(t, project, "probe-during")
	t.Logf("2-replica App in zones a,b: %v before the freeze, %v during it", before.Round(time.Millisecond), during.Round(time.Millisecond))
	if during > 3*before+3*time.Second {
		t.Errorf("healthy clusters slowed by the frozen one: %v during vs %v before", during, before)
	}

	// zone-c comes back: the shard it no longer has a place in is removed.
	if err := paused.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, func() error {
			_, err := zc.Client.AppsV1().Deployments(api.Namespace(project)).Get(ctx, "api", metav1.GetOptions{})
			if err == nil {
				return errors.New("stale shard still in zone-c")
			}
			return nil
		}())
	}, 90*time.Second, 250*time.Millisecond)
	// Let the inventory see zone-c healthy before the next test.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, func() error {
			cs, err := cl.Clusters(ctx)
			if err != nil {
				return err
			}
			for _, c := range cs {
				if !c.Healthy {
					return fmt.Errorf("%s unhealthy", c.Name)
				}
			}
			return nil
		}())
	}, 60*time.Second, 250*time.Millisecond)
}

func TestServiceRestartsLoseAndDuplicateNothing(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project, n = "restarts", 100
	doc := func(i int) []byte {
		return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":"w-%03d"},
"spec":{"replicas":1,"template":{"containers":[{"name":"a","image":"nginx","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`, project, i))
	}
	// A client that retries until the region takes the workload, as the
	// SDK will: a resubmitted document is idempotent.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			admitted := assert.Eventually(t, func() bool {
				_, err := cl.Submit(ctx, doc(i))
				var e *busclient.Error
				if err != nil && errors.As(err, &e) && e.Status < 500 {
					t.Errorf("w-%03d rejected: %v", i, err)
					return true
				}
				return err == nil
			}, 10*time.Second, 50*time.Millisecond)
			if !admitted {
				t.Errorf("w-%03d not admitted within 10s", i)
			}
			time.Sleep(40 * time.Millisecond) // the subject: a steady stream of submissions
		}
	}()
	for _, svc := range []string{"quota", "admission", "aggregator", "scheduler", "propagator"} {
		time.Sleep(700 * time.Millisecond) // the subject: restarts spaced through the stream
		if err := reg.Restart(ctx, svc); err != nil {
			t.Fatal(err)
		}
		t.Logf("restarted %s", svc)
	}
	wg.Wait()

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, func() error {
			running, stored, placed := 0, 0, 0
			phases := map[string]int{}
			for i := range n {
				key := api.Key(project, api.KindApp, fmt.Sprintf("w-%03d", i))
				if w, _ := cl.Workload(ctx, key); w != nil {
					stored++
				}
				if p, _ := cl.Placement(ctx, key); p != nil && len(p.Shards) > 0 {
					placed++
				}
				st, _ := cl.Status(ctx, key)
				if st != nil {
					phases[st.Phase]++
				}
				if st != nil && st.Phase == api.PhaseRunning && st.Ready == 1 {
					running++
				}
			}
			if running != n {
				inClusters := map[string]string{}
				for _, c := range reg.Env.Clusters {
					ds, _ := c.Client.AppsV1().Deployments(api.Namespace(project)).List(ctx, metav1.ListOptions{})
					ps, _ := c.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{})
					phase := map[string]int{}
					for _, p := range ps.Items {
						phase[string(p.Status.Phase)]++
					}
					if ds != nil {
						inClusters[c.Name] = fmt.Sprintf("%d deployments, pods %v", len(ds.Items), phase)
					}
				}
				return fmt.Errorf("%d of %d Running (%d stored, %d placed, phases %v, clusters %v)", running, n, stored, placed, phases, inClusters)
			}
			return nil
		}())
	}, 3*time.Minute, 250*time.Millisecond)
	// Exactly one Deployment and one pod per workload across the clusters.
	deployments, pods := map[string]int{}, map[string]int{}
	for _, c := range reg.Env.Clusters {
		ds, err := c.Client.AppsV1().Deployments(api.Namespace(project)).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds.Items {
			deployments[d.Name]++
		}
		ps, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps.Items {
			if p.DeletionTimestamp == nil {
				pods[p.Labels[api.LabelWorkload]]++
			}
		}
	}
	if len(deployments) != n {
		t.Errorf("%d distinct deployments, want %d", len(deployments), n)
	}
	for name, k := range deployments {
		if k != 1 || pods[name] != 1 {
			t.Errorf("%s: %d deployments, %d pods; want 1, 1", name, k, pods[name])
		}
	}
	l, err := cl.Quota(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	if got := int(l.Reservations); got != n {
		t.Errorf("%d reservations, want %d", got, n)
	}
}
