// Package bench measures the federation pipeline against the member
// clusters themselves: the same Deployments applied by Atoll and directly
// with client-go, interleaved in one run on the same clusters.
package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/admission"
	"atoll.dev/services/atoll/region"
)

// Parameters, overridable from the environment for quicker runs.
var (
	apps     = envInt("ATOLL_BENCH_APPS", 500)
	perMin   = envInt("ATOLL_BENCH_RATE", 1000) // apps per minute, each path
	nodes    = envInt("ATOLL_BENCH_NODES", 50)
	replicas = 3
	// onlyPath runs one path alone ("atoll" or "direct"), for diagnosis.
	onlyPath = os.Getenv("ATOLL_BENCH_ONLY")
	// clusterNice lowers the member clusters' CPU priority below the
	// region's, as when the services run on machines of their own (0 puts
	// them level with it); backgroundNice lowers their controllers,
	// schedulers and simulated kubelets further (see testenv.Options).
	clusterNice    = envNice("ATOLL_BENCH_CLUSTER_NICE", 10)
	backgroundNice = envNice("ATOLL_BENCH_CLUSTER_BACKGROUND_NICE", 0)
)

func envNice(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v >= 0 && v <= 19 {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

const (
	project  = "bench"
	directNS = "direct"
)

// tracker records when each app's pods are all Running.
type tracker struct {
	mu      sync.Mutex
	running map[string]map[string]bool // app -> running pod UIDs
	done    map[string]time.Time
	created map[string]time.Time // app -> creation of its last pod
	// podLag collects, per Running pod, Running seen minus pod created.
	podLag []time.Duration
}

func newTracker() *tracker {
	return &tracker{running: map[string]map[string]bool{}, done: map[string]time.Time{}, created: map[string]time.Time{}}
}

func (t *tracker) observe(app string, p *corev1.Pod) {
	if app == "" || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.running[app] == nil {
		t.running[app] = map[string]bool{}
	}
	if !t.running[app][string(p.UID)] {
		t.podLag = append(t.podLag, now.Sub(p.CreationTimestamp.Time))
		if c := p.CreationTimestamp.Time; c.After(t.created[app]) {
			t.created[app] = c
		}
	}
	t.running[app][string(p.UID)] = true
	if len(t.running[app]) >= replicas {
		if _, ok := t.done[app]; !ok {
			t.done[app] = now
		}
	}
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.done)
}

func (t *tracker) at(app string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.done[app]
	return v, ok
}

// directDeployment is the object Atoll renders for one shard of appDoc,
// sidecar included, so both paths ask the clusters for the same work.
func directDeployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	sc := admission.DefaultConfig().Sidecars[0]
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: directNS, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					InitContainers: []corev1.Container{{
						Name: sc.Name, Image: sc.Image, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{"cpu": mustQ(sc.Resources.Requests.CPU), "memory": mustQ(sc.Resources.Requests.Memory)},
							Limits:   corev1.ResourceList{"cpu": mustQ(sc.Resources.Limits.CPU), "memory": mustQ(sc.Resources.Limits.Memory)},
						},
					}},
					Containers: []corev1.Container{{
						Name: "web", Image: "nginx:1.27",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": mustQ("100m"), "memory": mustQ("64Mi")}},
					}},
				},
			},
		},
	}
}

func appDoc(name string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`,
		project, name, replicas))
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// BenchmarkPipeline submits apps Apps of 3 replicas through Atoll and, in
// the same run, the same 3 Deployments of 1 replica per app (one per
// cluster, what Atoll produces) directly with client-go, interleaved at the
// same rate. It reports submit-to-propagated and submit-to-all-Pods-Running
// P50 and P99, and Running's ratio against the direct baseline.
func BenchmarkPipeline(b *testing.B) {
	if testing.Short() {
		b.Skip("needs member clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir := b.TempDir()
	log := benchLogger()
	reg, err := region.Start(ctx, region.Options{Dir: dir, Nodes: nodes, Logger: log, ClusterNice: clusterNice, ClusterBackgroundNice: backgroundNice})
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Stop(context.Background())
	cl, gw := regionClient(b, reg)
	defer gw.Close()

	atollT, directT := newTracker(), newTracker()
	for _, c := range reg.Env.Clusters {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: directNS}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		f := informers.NewSharedInformerFactory(c.Client, 0)
		inf := f.Core().V1().Pods().Informer()
		handle := func(o any) {
			p, ok := o.(*corev1.Pod)
			if !ok {
				return
			}
			switch p.Namespace {
			case api.Namespace(project):
				atollT.observe(p.Labels[api.LabelWorkload], p)
			case directNS:
				directT.observe(p.Labels["app"], p)
			}
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, o any) { handle(o) }})
		f.Start(ctx.Done())
		f.WaitForCacheSync(ctx.Done())
	}
	// Namespaces and service accounts must exist before the clock starts.
	for _, c := range reg.Env.Clusters {
		require.EventuallyWithT(b, func(ct *assert.CollectT) {
			_, err := c.Client.CoreV1().ServiceAccounts(directNS).Get(ctx, "default", metav1.GetOptions{})
			assert.NoError(ct, err, "%s: default service account", c.Name)
		}, 5*time.Minute, 100*time.Millisecond)
	}

	var pmu sync.Mutex
	seen := map[string]map[string]time.Time{} // event -> app -> first arrival
	sub, err := reg.Bus.NC.Subscribe(bus.EventSubject(project, api.KindApp, "*", "*"), func(m *nats.Msg) {
		now := time.Now()
		parts := strings.Split(m.Subject, ".")
		name, ev := parts[4], parts[5]
		pmu.Lock()
		if seen[ev] == nil {
			seen[ev] = map[string]time.Time{}
		}
		if _, ok := seen[ev][name]; !ok {
			seen[ev][name] = now
		}
		pmu.Unlock()
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()

	// Warm the Atoll path (namespace creation, service account) outside the clock.
	if _, err := cl.Submit(ctx, appDoc("warmup")); err != nil {
		b.Fatal(err)
	}
	require.Eventually(b, func() bool { return atollT.count() >= 1 }, 10*time.Minute, 50*time.Millisecond, "the warm-up App never ran")

	b.ResetTimer()
	interval := time.Minute / time.Duration(perMin)
	names := make([]string, apps)
	for i := range names {
		names[i] = fmt.Sprintf("app-%04d", i)
	}
	// Both paths in one stream at the same rate, alternating in blocks of
	// 25 apps, so each sees the same cluster state and load on average.
	// Direct: per app, what Atoll creates (one 1-replica Deployment in
	// each cluster), straight through client-go.
	var (
		cmu     sync.Mutex
		created []time.Duration // direct: the three creates all returned
	)
	viaDirect := func(ctx context.Context, name string) error {
		t0 := time.Now()
		defer func() {
			cmu.Lock()
			created = append(created, time.Since(t0))
			cmu.Unlock()
		}()
		var wg sync.WaitGroup
		errs := make([]error, len(reg.Env.Clusters))
		for i, c := range reg.Env.Clusters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = c.Client.AppsV1().Deployments(directNS).Create(ctx, directDeployment(name), metav1.CreateOptions{})
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	viaAtoll := func(ctx context.Context, name string) error {
		_, err := cl.Submit(ctx, appDoc(name))
		return err
	}
	var plan []step
	const block = 25
	for i := 0; i < apps; i += block {
		for _, path := range []string{"atoll", "direct"} {
			if onlyPath != "" && onlyPath != path {
				continue
			}
			for j := i; j < min(i+block, apps); j++ {
				f := viaAtoll
				if path == "direct" {
					f = viaDirect
				}
				plan = append(plan, step{path: path, name: names[j], do: f})
			}
		}
	}
	started, rate := offer(b, plan, interval)
	submitted, directStart := started["atoll"], started["direct"]
	atollRate, directRate := rate, rate
	// Not fatal: the report below still says which apps did not finish.
	if onlyPath != "direct" {
		assert.Eventually(b, func() bool { return atollT.count() >= apps+1 }, 10*time.Minute, 200*time.Millisecond, "Atoll's apps all Running")
	}
	if onlyPath != "atoll" {
		assert.Eventually(b, func() bool { return directT.count() >= apps }, 10*time.Minute, 200*time.Millisecond, "direct apps all Running")
	}
	b.StopTimer()
	diagnose(reg, []string{names[len(names)/2], names[len(names)-1]}, submitted)

	timeline(names, submitted, seen, &pmu)
	var toProp, toRunning, direct []time.Duration
	var stages [3][]time.Duration // submit->admitted, ->scheduled, ->propagated
	missing := 0
	for _, name := range names {
		t0 := submitted[name]
		pmu.Lock()
		tp, okp := seen[api.EventPropagated][name]
		if ta, ok := seen[api.EventAdmitted][name]; ok && okp {
			if ts, ok := seen[api.EventScheduled][name]; ok {
				stages[0] = append(stages[0], ta.Sub(t0))
				stages[1] = append(stages[1], ts.Sub(ta))
				stages[2] = append(stages[2], tp.Sub(ts))
			}
		}
		pmu.Unlock()
		tr, okr := atollT.at(name)
		td, okd := directT.at(name)
		if onlyPath != "direct" && (!okp || !okr) || onlyPath != "atoll" && !okd {
			missing++
			continue
		}
		if onlyPath != "direct" {
			toProp = append(toProp, tp.Sub(t0))
			toRunning = append(toRunning, tr.Sub(t0))
		}
		if onlyPath != "atoll" {
			direct = append(direct, td.Sub(directStart[name]))
		}
	}
	if missing > 0 {
		b.Errorf("%d of %d apps did not finish on both paths", missing, apps)
	}
	p50, p99 := percentile(toRunning, .50), percentile(toRunning, .99)
	d50, d99 := percentile(direct, .50), percentile(direct, .99)
	q50, q99 := percentile(toProp, .50), percentile(toProp, .99)
	fmt.Printf("\npipeline: %d Apps x %d replicas through Atoll and the same %d Deployments direct, over %d clusters x %d nodes,\n  alternating in blocks of 25 at %.0f submissions/min (Atoll %.0f/min, direct %.0f/min while their blocks run)\n",
		apps, replicas, apps*len(reg.Env.Clusters), len(reg.Env.Clusters), nodes, rate, atollRate, directRate)
	fmt.Printf("  %-34s %10s %10s\n", "", "P50", "P99")
	fmt.Printf("  %-34s %10v %10v\n", "Atoll submit -> propagated", q50.Round(time.Millisecond), q99.Round(time.Millisecond))
	c50, c99 := percentile(created, .50), percentile(created, .99)
	fmt.Printf("  %-34s %10v %10v\n", "direct client-go creates returned", c50.Round(time.Millisecond), c99.Round(time.Millisecond))
	fmt.Printf("  %-34s %10.2f %10.2f\n", "ratio Atoll / direct (applied)", ratio(q50, c50), ratio(q99, c99))
	fmt.Printf("  %-34s %10v %10v\n", "Atoll submit -> all Pods Running", p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	fmt.Printf("  %-34s %10v %10v\n", "direct client-go -> all Running", d50.Round(time.Millisecond), d99.Round(time.Millisecond))
	fmt.Printf("  %-34s %10.2f %10.2f\n", "ratio Atoll / direct (Running)", ratio(p50, d50), ratio(p99, d99))
	fmt.Printf("  %-34s %10v %10v\n", "  pod created -> Running, Atoll", percentile(atollT.podLag, .5).Round(time.Millisecond), percentile(atollT.podLag, .99).Round(time.Millisecond))
	fmt.Printf("  %-34s %10v %10v\n", "  pod created -> Running, direct", percentile(directT.podLag, .5).Round(time.Millisecond), percentile(directT.podLag, .99).Round(time.Millisecond))
	var lastPodA, lastPodD []time.Duration
	for _, name := range names {
		if c, ok := atollT.created[name]; ok {
			lastPodA = append(lastPodA, c.Sub(submitted[name]))
		}
		if c, ok := directT.created[name]; ok {
			lastPodD = append(lastPodD, c.Sub(directStart[name]))
		}
	}
	fmt.Printf("  %-34s %10v %10v\n", "  submit -> last pod created, Atoll", percentile(lastPodA, .5).Round(time.Millisecond), percentile(lastPodA, .99).Round(time.Millisecond))
	fmt.Printf("  %-34s %10v %10v\n", "  create -> last pod created, direct", percentile(lastPodD, .5).Round(time.Millisecond), percentile(lastPodD, .99).Round(time.Millisecond))
	for i, stage := range []string{"  stage: submit -> admitted", "  stage: admitted -> scheduled", "  stage: scheduled -> propagated"} {
		fmt.Printf("  %-34s %10v %10v\n", stage, percentile(stages[i], .5).Round(time.Millisecond), percentile(stages[i], .99).Round(time.Millisecond))
	}
	b.ReportMetric(float64(q99.Milliseconds()), "propagated-p99-ms")
	b.ReportMetric(float64(c99.Milliseconds()), "direct-created-p99-ms")
	b.ReportMetric(float64(p99.Milliseconds()), "running-p99-ms")
	b.ReportMetric(float64(d99.Milliseconds()), "direct-p99-ms")
	b.ReportMetric(ratio(p99, d99), "p99-ratio")
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// step is one submission of the plan.
type step struct {
	path, name string
	do         func(context.Context, string) error
}

// offer runs the plan at a steady rate, each step in its own goroutine,
// and returns when each step started, per path, and the rate achieved.
func offer(b *testing.B, plan []step, interval time.Duration) (map[string]map[string]time.Time, float64) {
	b.Helper()
	ctx := context.Background()
	started := map[string]map[string]time.Time{"atoll": {}, "direct": {}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	tick := time.NewTicker(interval)
	defer tick.Stop()
	begin := time.Now()
	for _, st := range plan {
		<-tick.C
		started[st.path][st.name] = time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := st.do(ctx, st.name); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s %s at +%v: %w", st.path, st.name, time.Since(begin).Round(time.Millisecond), err))
				mu.Unlock()
			}
		}()
	}
	offered := time.Since(begin)
	wg.Wait()
	if len(errs) > 0 {
		// Errors other than the open breaker say why it opened.
		first := errs[0]
		if i := slices.IndexFunc(errs, func(err error) bool { return !errors.Is(err, gobreaker.ErrOpenState) }); i >= 0 {
			first = errs[i]
		}
		b.Fatalf("%d submissions failed, first cause: %v", len(errs), first)
	}
	return started, float64(len(plan)) / offered.Minutes()
}
