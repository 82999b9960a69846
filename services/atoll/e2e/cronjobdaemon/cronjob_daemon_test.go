package cronjobdaemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
)

// post creates a workload through the gateway and returns the status code
// and body.
func post(t *testing.T, project, token, doc string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", reg.GatewayURL+"/v1/projects/"+project+"/workloads", strings.NewReader(doc))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String()
}

func reader() *busclient.Client { return busclient.New(reg.Bus, nil) }

const daemonDoc = `{"kind":"Daemon","metadata":{"name":"agent"},"spec":{
"placement":{"nodeSelector":{"node.kubernetes.io/instance-type":"m6i.4xlarge"},
 "tolerations":[{"key":"kwok.x-k8s.io/node","operator":"Exists","effect":"NoSchedule"}]},
"template":{"containers":[{"name":"agent","image":"agent:1","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`

// daemonPods returns, per node, how many of the Daemon's pods run there.
func daemonPods(ctx context.Context, c *testenv.Cluster, project, name string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pods, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out[p.Spec.NodeName]++
		}
	}
	return out, nil
}

// TestDaemonOnEveryMatchingNodeOfEveryCluster: a tenant's Daemon is
// refused with 403; a platform admin's lands one pod on each matching node
// of every cluster, then on the matching nodes added to zone-c later, and
// not on a node its nodeSelector does not match. Its status sums the
// clusters.
func TestDaemonOnEveryMatchingNodeOfEveryCluster(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project = "infra"
	key := api.Key(project, api.KindDaemon, "agent")

	tenant := reg.Token("dev", false, map[string]string{project: "admin"})
	code, body := post(t, project, tenant, daemonDoc)
	require.Equal(t, http.StatusForbidden, code, "a tenant (even the project's admin) creating a Daemon: %s", body)
	assert.Contains(t, body, "platform admins")

	code, body = post(t, project, reg.AdminToken, daemonDoc)
	require.Equal(t, http.StatusCreated, code, body)

	// want is the matching nodes per cluster: the region's fleet.
	want := map[string][]string{}
	for _, c := range reg.Env.Clusters {
		nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "node.kubernetes.io/instance-type=m6i.4xlarge"})
		require.NoError(t, err)
		for _, n := range nodes.Items {
			want[c.Name] = append(want[c.Name], n.Name)
		}
		require.Len(t, want[c.Name], nodesPerZone, "matching nodes in %s", c.Name)
	}
	onePerNode := func(c *assert.CollectT) {
		for _, cl := range reg.Env.Clusters {
			got, err := daemonPods(ctx, cl, project, "agent")
			if !assert.NoError(c, err, cl.Name) {
				continue
			}
			wantPods := map[string]int{}
			for _, n := range want[cl.Name] {
				wantPods[n] = 1
			}
			assert.Equal(c, wantPods, got, "running pods per node in %s", cl.Name)
		}
		st, err := reader().Status(ctx, key)
		if assert.NoError(c, err) && assert.NotNil(c, st) && assert.NotNil(c, st.Daemon) {
			total := 0
			for _, ns := range want {
				total += len(ns)
			}
			assert.EqualValues(c, total, st.Daemon.Desired)
			assert.EqualValues(c, total, st.Daemon.Ready)
			assert.Empty(c, st.Daemon.Behind)
			assert.Len(c, st.Daemon.Clusters, len(reg.Env.Clusters))
			assert.Equal(c, api.PhaseRunning, st.Phase)
		}
	}
	start := time.Now()
	require.EventuallyWithT(t, onePerNode, 90*time.Second, 500*time.Millisecond)
	t.Logf("one pod per matching node in %d clusters %v after create", len(reg.Env.Clusters), time.Since(start).Round(time.Millisecond))

	// Nodes join zone-c later: two that match, one that does not.
	zc := reg.Env.Cluster("zone-c")
	added, err := zc.AddNodes(ctx, testenv.NodePool{Name: "late", Count: 2, CPU: "16", Memory: "64Gi", InstanceType: "m6i.4xlarge"})
	require.NoError(t, err)
	_, err = zc.AddNodes(ctx, testenv.NodePool{Name: "small", Count: 1, CPU: "4", Memory: "8Gi", InstanceType: "c6i.xlarge"})
	require.NoError(t, err)
	want[zc.Name] = append(want[zc.Name], added...)
	start = time.Now()
	require.EventuallyWithT(t, onePerNode, 90*time.Second, 500*time.Millisecond)
	t.Logf("the %d matching nodes added to zone-c run the Daemon %v later; the non-matching one does not", len(added), time.Since(start).Round(time.Millisecond))
}

// firing is one Job the CronJob made.
type firing struct{ cluster, job string }

// firings records every Job of a CronJob seen in any cluster, by the
// schedule time it was made for, polled from every reachable cluster.
type firings struct {
	mu     sync.Mutex
	byTime map[time.Time]map[firing]bool
}

// pollEvery is how often each cluster's Jobs are listed: a firing is
// seen well within the 2 s the test leaves between a schedule time and
// the lost cluster's return.
const pollEvery = 250 * time.Millisecond

// poll records the Jobs of every cluster once.
func (f *firings) poll(ctx context.Context, project, name string) {
	var wg sync.WaitGroup
	for _, c := range reg.Env.Clusters {
		wg.Go(func() { f.pollCluster(ctx, c, project, name) })
	}
	wg.Wait()
}

// pollEach records the Jobs of each cluster every pollEvery until ctx
// ends, each cluster on its own: a frozen one, which answers nothing
// until its list times out, does not delay the others.
func (f *firings) pollEach(ctx context.Context, wg *sync.WaitGroup, project, name string) {
	for _, c := range reg.Env.Clusters {
		wg.Go(func() {
			for ctx.Err() == nil {
				f.pollCluster(ctx, c, project, name)
				select {
				case <-ctx.Done():
				case <-time.After(pollEvery):
				}
			}
		})
	}
}

// pollCluster records the Jobs of c once.
func (f *firings) pollCluster(ctx context.Context, c *testenv.Cluster, project, name string) {
	// A frozen API server does not answer: that cluster is skipped.
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	jobs, err := c.Client.BatchV1().Jobs(api.Namespace(project)).List(lctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range jobs.Items {
		at, err := time.Parse(time.RFC3339, j.Annotations[batchv1.CronJobScheduledTimestampAnnotation])
		if err != nil {
			continue
		}
		if f.byTime[at] == nil {
			f.byTime[at] = map[firing]bool{}
		}
		f.byTime[at][firing{c.Name, j.Name}] = true
	}
}

// snapshot returns the schedule times seen, sorted, and the firings of each.
func (f *firings) snapshot() ([]time.Time, map[time.Time][]firing) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[time.Time][]firing{}
	for at, fs := range f.byTime {
		out[at] = slices.Collect(maps.Keys(fs))
	}
	times := slices.Collect(maps.Keys(out))
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	return times, out
}

// TestCronJobFiresOnceAcrossTheRegionAndMovesWithoutRefiring: an
// every-minute CronJob fires once per minute in the whole region (Jobs
// counted in every cluster by their scheduled time); when its cluster's
// API server is frozen, the scheduler moves it with a fire-from past the
// old cluster's lease (the time fence, api.KindCronJob) and the next
// firings happen in another cluster, from fire-from on, no schedule time
// twice; the times the fence skips are logged. When the lost cluster
// comes back (just after a schedule time, so that its CronJob controller
// may try to fire it) its stale CronJob is removed, and no schedule time
// was fired twice in the region: a Job the old cluster tries to make is
// refused by its own API server.
func TestCronJobFiresOnceAcrossTheRegionAndMovesWithoutRefiring(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project, name = "batch", "tick"
	key := api.Key(project, api.KindCronJob, name)
	tenant := reg.Token("dev", false, map[string]string{project: "developer"})
	// History limits high enough that no Job is deleted while counted.
	doc := fmt.Sprintf(`{"kind":"CronJob","metadata":{"name":%q},"spec":{"schedule":"* * * * *","successfulJobsHistoryLimit":50,"failedJobsHistoryLimit":50,
"template":{"containers":[{"name":"c","image":"busybox","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`, name)
	code, body := post(t, project, tenant, doc)
	require.Equal(t, http.StatusCreated, code, body)

	rc := reader()
	var first string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := rc.Placement(ctx, key)
		if assert.NoError(c, err) && assert.NotNil(c, p) && assert.Len(c, p.Shards, 1) {
			first = p.Shards[0].Cluster
		}
	}, 60*time.Second, 250*time.Millisecond)

	f := &firings{byTime: map[time.Time]map[firing]bool{}}
	pollCtx, stopPolling := context.WithCancel(ctx)
	var polling sync.WaitGroup
	f.pollEach(pollCtx, &polling, project, name)
	defer func() { stopPolling(); polling.Wait() }()

	// checkOnce fails for a schedule time fired more than once and
	// returns the times fired in each cluster.
	checkOnce := func(c assert.TestingT) map[string][]time.Time {
		times, by := f.snapshot()
		per := map[string][]time.Time{}
		for _, at := range times {
			assert.Len(c, by[at], 1, "schedule time %s fired by %v", at.Format(time.TimeOnly), by[at])
			for _, fr := range by[at] {
				per[fr.cluster] = append(per[fr.cluster], at)
			}
		}
		return per
	}

	// Three consecutive minutes fire in the first cluster, once each.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		per := checkOnce(c)
		assert.Equal(c, []string{first}, slices.Collect(maps.Keys(per)), "clusters that fired")
		assert.GreaterOrEqual(c, len(per[first]), 3, "firings in %s", first)
	}, 5*time.Minute, pollEvery)
	before := checkOnce(t)[first]
	for i := 1; i < len(before); i++ {
		assert.Equal(t, time.Minute, before[i].Sub(before[i-1]), "firings %v are not one a minute", before)
	}
	st, err := rc.Status(ctx, key)
	require.NoError(t, err)
	require.NotNil(t, st.CronJob, "status %+v", st)
	assert.Equal(t, first, st.CronJob.Cluster)
	assert.NotEmpty(t, st.CronJob.Runs)
	t.Logf("%d firings in %s at %v; status last schedule %v, %d runs", len(before), first, fmtTimes(before), st.CronJob.LastScheduleTime, len(st.CronJob.Runs))

	// Its cluster is lost: the API server freezes.
	lost := reg.Env.Cluster(first)
	paused, err := lost.PauseComponent(testenv.KubeAPIServer)
	require.NoError(t, err)
	resumed := false
	defer func() {
		if !resumed {
			_ = paused.Resume()
		}
	}()
	frozeAt := time.Now()
	var (
		second   string
		fireFrom time.Time
	)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := rc.Placement(ctx, key)
		if assert.NoError(c, err) && assert.NotNil(c, p) && assert.Len(c, p.Shards, 1) {
			second, fireFrom = p.Shards[0].Cluster, p.Shards[0].FireFrom
			assert.NotEqual(c, first, second, "still placed in the frozen cluster")
		}
	}, 90*time.Second, 250*time.Millisecond)
	movedAfter := time.Since(frozeAt).Round(time.Millisecond)
	t.Logf("%s frozen: CronJob moved to %s %v later, fire-from %s", first, second, movedAfter, fireFrom.UTC().Format(time.TimeOnly))
	// The old cluster's last lease was renewed before it froze.
	require.False(t, fireFrom.Before(frozeAt.Add(fenceLease)), "fire-from %v is within the lease of the cluster frozen at %v", fireFrom, frozeAt)

	// The next firings happen in the new cluster, from fire-from on; no
	// time fires twice. The fence makes the first one wait up to the move
	// + V + margin + a minute: a minute more than without it.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		per := checkOnce(c)
		assert.GreaterOrEqual(c, len(per[second]), 2, "firings in %s", second)
	}, 5*time.Minute, pollEvery)
	per := checkOnce(t)
	after := per[second]
	assert.True(t, after[0].After(before[len(before)-1]), "%s fired %v, not after %s's last %v", second, fmtTimes(after), first, before[len(before)-1])
	assert.False(t, after[0].Before(fireFrom), "%s fired %v, before its fire-from %v", second, fmtTimes(after), fireFrom)
	var skipped []time.Time
	for at := before[len(before)-1].Add(time.Minute); at.Before(after[0]); at = at.Add(time.Minute) {
		skipped = append(skipped, at)
	}
	t.Logf("skipped (lost cluster frozen, then the fence up to %s): %d times %v", fireFrom.UTC().Format(time.TimeOnly), len(skipped), fmtTimes(skipped))
	for i := 1; i < len(after); i++ {
		assert.Equal(t, time.Minute, after[i].Sub(after[i-1]), "firings %v in %s are not one a minute", fmtTimes(after), second)
	}
	for cl, ts := range per {
		if cl != first && cl != second {
			t.Errorf("%s fired %v: the CronJob was never placed there", cl, fmtTimes(ts))
		}
	}
	t.Logf("firings: %s %v, %s %v; %d schedule times, each once", first, fmtTimes(per[first]), second, fmtTimes(after), len(per[first])+len(after))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := rc.Status(ctx, key)
		if assert.NoError(c, err) && assert.NotNil(c, st) && assert.NotNil(c, st.CronJob) {
			assert.Equal(c, second, st.CronJob.Cluster)
			if assert.NotNil(c, st.CronJob.LastScheduleTime) {
				assert.False(c, st.CronJob.LastScheduleTime.Before(after[0]), "last schedule %v", st.CronJob.LastScheduleTime)
			}
			assert.Equal(c, api.PhaseRunning, st.Phase)
		}
	}, 30*time.Second, 250*time.Millisecond)

	// The lost cluster comes back 2 s after a schedule time, well within
	// its starting deadline, so its CronJob controller may try to fire that
	// time, which the new cluster fired: the sleep is the subject (when the
	// cluster returns), not a wait for a condition. That is the next such
	// moment: 2 s after the time the new cluster just fired when it is
	// still ahead (the firing seen within a poll), else after the next.
	next := time.Now().Add(-2 * time.Second).Truncate(time.Minute).Add(time.Minute + 2*time.Second)
	time.Sleep(time.Until(next))
	require.NoError(t, paused.Resume())
	resumed = true
	resumedAt := time.Now()
	// Its stale CronJob is removed (the poller keeps recording every Job
	// of every cluster meanwhile).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := lost.Client.BatchV1().CronJobs(api.Namespace(project)).Get(lctx, name, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "stale CronJob still in %s: %v", first, err)
	}, 90*time.Second, 500*time.Millisecond)
	t.Logf("%s came back at %s; its stale CronJob removed %v later", first, resumedAt.UTC().Format(time.TimeOnly), time.Since(resumedAt).Round(time.Millisecond))
	f.poll(ctx, project, name)
	stopPolling()
	polling.Wait()
	// The Jobs of the removed CronJob are garbage collected, perhaps between
	// two polls: the lost cluster's CronJob controller's events tell every
	// Job it made (named <cronjob>-<minutes since the epoch of the schedule
	// time>) and every one the fence refused.
	events, err := lost.Client.CoreV1().Events(api.Namespace(project)).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var refused []string
	for _, e := range events.Items {
		if e.InvolvedObject.Kind != "CronJob" || e.InvolvedObject.Name != name {
			continue
		}
		switch e.Reason {
		case "SuccessfulCreate":
			var minutes int64
			if _, err := fmt.Sscanf(e.Message, "Created job "+name+"-%d", &minutes); err == nil {
				at := time.Unix(minutes*60, 0).UTC()
				f.mu.Lock()
				if f.byTime[at] == nil {
					f.byTime[at] = map[firing]bool{}
				}
				f.byTime[at][firing{first, fmt.Sprintf("%s-%d", name, minutes)}] = true
				f.mu.Unlock()
			}
		case "FailedCreate":
			if e.LastTimestamp.After(resumedAt.Add(-time.Minute)) || e.EventTime.After(resumedAt.Add(-time.Minute)) {
				refused = append(refused, e.Message)
			}
		}
	}
	t.Logf("after %s came back, Jobs its API server refused: %d %v", first, len(refused), refused)
	// No schedule time fired twice in the region, the lost cluster's return included.
	per = checkOnce(t)
	t.Logf("all firings: %s %v, %s %v", first, fmtTimes(per[first]), second, fmtTimes(per[second]))
}

func fmtTimes(ts []time.Time) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.UTC().Format(time.TimeOnly)
	}
	return "[" + strings.Join(s, " ") + "]"
}
