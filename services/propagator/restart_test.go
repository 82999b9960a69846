package propagator

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/testenv"
)

// A restart is measured in front of a member cluster that already holds
// the shards of many propagated workloads. Those shards are put there by
// prefill, directly with client-go, not by running a propagator first:
// objects made by the propagator's own render, stamp and create function
// with its field manager are what a previous propagator would have left
// (same labels, annotations and spec hash), and creating 10,000 of them
// that way takes seconds, where taking each through a propagator
// (placement, reconcile, create, informer, announcement) would take
// minutes of this small machine and measure nothing the restart needs.
// The cluster's controller-manager is paused for the whole run so that
// the Deployments make no Pods: the API server and etcd hold the objects
// a restart lists, and the machine's two cores go to the propagator.

// restartRun is what one restart measured.
type restartRun struct {
	existing int // shards in the cluster before the restart
	// ready is from the restart until Start returned: the buckets
	// mirrored, the cluster's objects listed, the lease campaign begun.
	ready time.Duration
	// propagated is the new App's latency, from its submission right
	// after Start returned until its propagated event.
	propagated time.Duration
	// replay is from the restart until every existing shard was checked.
	replay time.Duration
	// writes are the restarted propagator's writes to the cluster.
	writes []write
}

// restart starts a propagator in front of c (a restart: the buckets and
// the cluster hold what a previous one left), submits nw as soon as Start
// returns, waits until nw is announced and the replay of the existing
// shards is done, and stops the propagator.
func restart(tb testing.TB, b *bus.Bus, c *testenv.Cluster, existing int, nw *api.Workload) restartRun {
	tb.Helper()
	sub, err := b.NC.SubscribeSync(bus.EventSubject(nw.Metadata.Project, nw.Kind, nw.Metadata.Name, api.EventPropagated))
	require.NoError(tb, err)
	defer func() { _ = sub.Unsubscribe() }()
	writes := &writeLog{}
	begin := time.Now()
	r := startReplica(tb, b, "restarted-"+nw.Metadata.Name, []*testenv.Cluster{c}, writes, nil)
	run := restartRun{existing: existing, ready: time.Since(begin)}
	submitted := time.Now()
	seed(tb, b, []*api.Workload{nw}, []string{c.Name}, false)
	run.propagated = waitEvent(tb, sub, 30*time.Second).Sub(submitted)
	require.Eventually(tb, func() bool {
		tt := r.s.targets[c.Name].term.Load()
		return tt != nil && tt.replayLeft.Load() == 0
	}, 10*time.Minute, 5*time.Millisecond, "the replay ends")
	run.replay = time.Since(begin)
	r.s.Stop()
	run.writes = writes.of(c.Name)
	return run
}

func (r restartRun) log(tb testing.TB, what string) {
	tb.Helper()
	tb.Logf("%s: %d existing shards: ready %v after the restart; new App propagated %v after its submission; replay done %v after the restart; %d writes",
		what, r.existing, r.ready.Round(time.Millisecond), r.propagated.Round(time.Millisecond), r.replay.Round(time.Millisecond), len(r.writes))
}

// namespaceSetup says whether w applies project's namespace or the
// aggregator's debug RoleBinding in it (access.go), which the propagator
// applies with the namespace.
func (w write) namespaceSetup(project string) bool {
	ns := api.Namespace(project)
	return w.method == http.MethodPatch && (w.path == "/api/v1/namespaces/"+ns ||
		w.path == "/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/rolebindings/"+clusters.AggregatorDebugRole)
}

// checkOnlyNewWork checks that a restarted propagator created nw's shard
// (and its PodDisruptionBudget) and wrote nothing else but its namespace:
// the replay of the existing shards made no API call.
func checkOnlyNewWork(tb testing.TB, c *testenv.Cluster, r restartRun, nw *api.Workload) {
	tb.Helper()
	creates := 0
	for _, w := range r.writes {
		_, isDeployment := w.deployment()
		switch {
		case w.created():
			creates++
		case !isDeployment && w.namespaceSetup(nw.Metadata.Project):
			// The namespace and its debug RoleBinding, applied once per term.
		case w.method == http.MethodPatch && w.status == http.StatusCreated &&
			w.path == "/apis/policy/v1/namespaces/"+api.Namespace(nw.Metadata.Project)+"/poddisruptionbudgets/"+nw.Metadata.Name:
			// The new App's PodDisruptionBudget, applied with its Deployment.
		default:
			tb.Errorf("the restarted propagator wrote %v", w)
		}
	}
	assert.Equal(tb, 1, creates, "Deployments created after the restart")
	_, err := c.Client.AppsV1().Deployments(api.Namespace(nw.Metadata.Project)).Get(context.Background(), nw.Metadata.Name, metav1.GetOptions{})
	assert.NoError(tb, err, "the new App's Deployment")
}

// checkAnnouncedOnce checks that each of want's keys, and nothing else,
// has one propagated event.
func checkAnnouncedOnce(tb testing.TB, b *bus.Bus, want []string) {
	tb.Helper()
	ev, err := propagatedEvents(b)
	require.NoError(tb, err)
	for _, k := range want {
		if ev[k] != 1 {
			tb.Errorf("%s announced %d times", k, ev[k])
		}
	}
	assert.Len(tb, ev, len(want), "workloads announced")
}

// TestRestartPutsNewWorkFirst restarts a propagator in front of a member
// cluster that already holds the shards of 500 propagated workloads, of
// which one in 50 lost its propagated event (the previous propagator died
// between the apply and the event), and submits a new App at once: the
// App is applied and announced within a second; the replay of the others
// makes no API call, announces the ones whose event was lost, once, and
// none of the others again.
func TestRestartPutsNewWorkFirst(t *testing.T) {
	const existing, lostEvery = 500, 50
	env := testenv.New(t, testenv.Zones("a")...)
	c := env.Clusters[0]
	pauseControllers(t, c)
	b := openBus(t)
	var announced, lost []*api.Workload
	for i, w := range apps(0, existing, 1) {
		if i%lostEvery == 0 {
			lost = append(lost, w)
		} else {
			announced = append(announced, w)
		}
	}
	names := []string{c.Name}
	start := time.Now()
	sws := append(seed(t, b, announced, names, true), seed(t, b, lost, names, false)...)
	prefill(t, c, sws)
	t.Logf("prefilled %d shards (%d without their propagated event) in %v", existing, len(lost), time.Since(start).Round(time.Millisecond))

	nw := app("fresh-1", 1)
	r := restart(t, b, c, existing, nw)
	r.log(t, "restart")
	assert.Less(t, r.propagated, time.Second, "the new App's submit to propagated")
	checkOnlyNewWork(t, c, r, nw)
	keys := []string{nw.Key()}
	for _, sw := range sws {
		keys = append(keys, sw.w.Key())
	}
	checkAnnouncedOnce(t, b, keys)
}

// BenchmarkRestartWithExistingShards restarts a propagator in front of a
// member cluster that holds $ATOLL_BENCH_RESTART_SHARDS (default 10,000)
// shards of propagated workloads and submits a new App right after the
// restart; the baseline, in the same run and cluster, is the same
// restart and the same App with 100 existing shards. It prints, for
// both, the existing shards, the time from the restart until the
// propagator was ready, the new App's submit to propagated, and the
// replay's duration, and reports the ratio of the new App's latencies.
// The target: the new App propagated within 1 s (an error otherwise).
// Run it with -benchtime 1x: one iteration is the whole run.
func BenchmarkRestartWithExistingShards(b *testing.B) {
	const baselineShards = 100
	size := 10_000
	if s := os.Getenv("ATOLL_BENCH_RESTART_SHARDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= baselineShards+1 {
			b.Fatalf("ATOLL_BENCH_RESTART_SHARDS=%q: want a number above %d", s, baselineShards+1)
		}
		size = n
	}
	env := testenv.New(b, testenv.Zones("a")...)
	c := env.Clusters[0]
	pauseControllers(b, c)
	bs := openBus(b)
	names := []string{c.Name}
	var keys []string
	fill := func(from, to int) {
		start := time.Now()
		sws := seed(b, bs, apps(from, to, 1), names, true)
		prefill(b, c, sws)
		for _, sw := range sws {
			keys = append(keys, sw.w.Key())
		}
		b.Logf("prefilled %d shards in %v", to-from, time.Since(start).Round(time.Millisecond))
	}

	fill(0, baselineShards)
	nw := app("fresh-1", 1)
	base := restart(b, bs, c, baselineShards, nw)
	checkOnlyNewWork(b, c, base, nw)
	keys = append(keys, nw.Key())
	// With the baseline's new App, size shards in all.
	fill(baselineShards, size-1)
	nw = app("fresh-2", 1)
	run := restart(b, bs, c, size, nw)
	checkOnlyNewWork(b, c, run, nw)
	keys = append(keys, nw.Key())
	checkAnnouncedOnce(b, bs, keys)

	base.log(b, "baseline")
	run.log(b, "measured")
	ratio := float64(run.propagated) / float64(base.propagated)
	b.Logf("new App's submit to propagated: %v with %d existing shards, %v with %d: %.2fx",
		run.propagated.Round(time.Millisecond), size, base.propagated.Round(time.Millisecond), baselineShards, ratio)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(size), "shards")
	b.ReportMetric(ms(run.ready), "ready-ms")
	b.ReportMetric(ms(run.propagated), "propagated-ms")
	b.ReportMetric(ms(run.replay), "replay-ms")
	b.ReportMetric(ms(base.propagated), "baseline-propagated-ms")
	b.ReportMetric(ratio, "propagated-x-baseline")
	if run.propagated >= time.Second {
		b.Errorf("the new App was propagated %v after its submission, with %d existing shards; want under 1 s", run.propagated, size)
	}
}
