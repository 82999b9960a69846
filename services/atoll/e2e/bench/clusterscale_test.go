package bench

// The member-cluster scale benchmark: what does Atoll cost, and how fast
// does it start pods, in one member cluster the size PinCompute runs
// (3,000 nodes, 120,000 pods, 1,000 pod mutations a minute)?
//
// One region with one member cluster (zone a) of ATOLL_SCALE_NODES KWOK
// nodes, every service its own process (region.Options.Exec), so that
// each one's resident memory and CPU are its own. For each size of
// ATOLL_SCALE_PODS, ascending, the cluster is first filled with
// background pods up to that many pods in all, straight through client-go
// (bare pods bound to nodes round robin, many creates in flight; KWOK
// makes them Running), not through Atoll: the aggregator's informer holds
// every pod of the cluster however it got there. Then, for
// ATOLL_SCALE_MINUTES, Apps of one replica go through Atoll and the same
// Deployments of one replica straight through client-go (the
// baseline), alternating in blocks of 25, one stream at ATOLL_SCALE_RATE
// pod creations a minute (each side at that rate while its block runs, as
// BenchmarkPipeline offers them). Each side's submit -> pod Running is
// measured from the submission's start to the first time the bench's own
// informer sees its pod Running. The measured pods stay: they count in the
// next size's pods.
//
// Per size the bench prints both sides' P50 and P99 and their ratio
// (target P99 <= 25 s and <= 1.1x the baseline), each cluster-facing
// service's resident memory at the end of the window and CPU seconds per
// Atoll mutation over it, the aggregator's live heap (after a collection
// it is asked for through /debug/pprof/heap?gc=1) per pod of the cluster
// and the marginal bytes per pod between sizes, and the member API
// server's requests made by Atoll's services per mutation, from its audit
// log (testenv audits exactly the services' users). At the end: bytes
// per pod and CPU per mutation at the largest size against the smallest
// (target within 1.2x). The bench fails on a failed submission only.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/region"
)

// Cluster-scale parameters, from the environment.
var (
	// csNodes is the member cluster's KWOK nodes.
	csNodes = envInt("ATOLL_SCALE_NODES", 3000)
	// csPods are the cluster's pod counts measured, ascending.
	csPods = envSizes("ATOLL_SCALE_PODS", []int{10000, 30000})
	// csWindow is how long each size's submissions are offered
	// (ATOLL_SCALE_MINUTES, fractions allowed).
	csWindow = envMinutes("ATOLL_SCALE_MINUTES", 10)
	// csRate is pod mutations a minute, the stream both sides share.
	csRate = envInt("ATOLL_SCALE_RATE", 1000)
	// csFillers is how many background pod creates are in flight.
	csFillers = envInt("ATOLL_SCALE_FILLERS", 64)
	// csClusterNice is the member cluster's CPU priority (0: level with
	// the region's): here the cluster is what is measured, and KWOK
	// below the region's priority on a loaded machine marks nodes and
	// pods Ready at a few a second.
	csClusterNice = envNice("ATOLL_SCALE_CLUSTER_NICE", 0)
	// csProfiles, when set, is a directory where each measurement of a
	// service's live heap also keeps its heap profile
	// (<service>-<n>.pb.gz, n counting the measurements: idle, then
	// before and after each size), for go tool pprof.
	csProfiles = os.Getenv("ATOLL_SCALE_PROFILES")
)

const (
	csProject = "clusterscale"
	// csBackgroundNS holds the background pods.
	csBackgroundNS = "background"
	// csBlock is how many submissions in a row go to one side.
	csBlock = 25
	// csStoreDivisor divides the streams' and buckets' size limits.
	csStoreDivisor = 4
)

// csServices are the cluster-facing services whose costs grow with the
// cluster (clusters.Services).
var csServices = []string{"aggregator", "propagator", "remediation", "upgrade"}

func envMinutes(k string, def float64) time.Duration {
	if v, err := strconv.ParseFloat(os.Getenv(k), 64); err == nil && v > 0 {
		return time.Duration(v * float64(time.Minute))
	}
	return time.Duration(def * float64(time.Minute))
}

// firstRunning records when each app first has a pod Running.
type firstRunning struct {
	mu   sync.Mutex
	done map[string]time.Time
}

func (f *firstRunning) observe(app string, p *corev1.Pod) {
	if app == "" || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.done[app]; !ok {
		f.done[app] = time.Now()
	}
}

func (f *firstRunning) at(app string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.done[app]
	return t, ok
}

// watchRunning follows the pods of namespace ns, each attributed to the
// app its label names, until ctx ends.
func watchRunning(ctx context.Context, b *testing.B, c *testenv.Cluster, ns, label string) *firstRunning {
	b.Helper()
	f := &firstRunning{done: map[string]time.Time{}}
	fac := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(ns))
	inf := fac.Core().V1().Pods().Informer()
	handle := func(o any) {
		if p, ok := o.(*corev1.Pod); ok {
			f.observe(p.Labels[label], p)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, o any) { handle(o) }}); err != nil {
		b.Fatal(err)
	}
	fac.Start(ctx.Done())
	fac.WaitForCacheSync(ctx.Done())
	return f
}

// backgroundPod is one pod of background work, bound to node.
func backgroundPod(i int, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bg-%06d", i), Namespace: csBackgroundNS, Labels: map[string]string{"atoll.dev/bench": "background"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			Containers: []corev1.Container{{
				Name: "work", Image: "busybox:1.36",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": mustQ("10m"), "memory": mustQ("16Mi")}},
			}},
		},
	}
}

// fillBackground creates background pods from index from up to (not
// including) to, csFillers at a time, bound to the nodes round robin, and
// waits until none of the namespace's pods is Pending.
func fillBackground(ctx context.Context, c *testenv.Cluster, nodes []string, from, to int) error {
	start := time.Now()
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(csFillers)
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for i := from; i < to; i++ {
		select {
		case <-tick.C:
			fmt.Printf("  fill: %d of %d background pods created (%v)\n", done.Load(), to-from, time.Since(start).Round(time.Second))
		default:
		}
		g.Go(func() error {
			_, err := c.Client.CoreV1().Pods(csBackgroundNS).Create(gctx, backgroundPod(i, nodes[i%len(nodes)]), metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create background pod %d: %w", i, err)
			}
			done.Add(1)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	created := time.Since(start)
	for {
		// From the API server's cache: the list is the count of pods
		// KWOK has not started yet.
		l, err := c.Client.CoreV1().Pods(csBackgroundNS).List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending", ResourceVersion: "0"})
		if err == nil && len(l.Items) == 0 {
			fmt.Printf("  fill: %d background pods created in %v, all Running after %v\n", to-from, created.Round(time.Second), time.Since(start).Round(time.Second))
			return nil
		}
		if err == nil {
			fmt.Printf("  fill: %d background pods still Pending (%v)\n", len(l.Items), time.Since(start).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("background pods Running: %w", ctx.Err())
		case <-time.After(10 * time.Second):
		}
	}
}

// svcUsage is one service process's figures at one moment.
type svcUsage struct {
	cpu      time.Duration
	rss      uint64
	liveHeap uint64 // heap in use right after a collection
}

// usageOfServices reads each cluster-facing service's CPU time, resident
// memory and, after asking it to collect, its heap in use.
func usageOfServices(ctx context.Context, b *testing.B, reg *region.Region) map[string]svcUsage {
	b.Helper()
	us, err := reg.Usage(ctx)
	if err != nil {
		b.Logf("usage: %v", err)
	}
	out := map[string]svcUsage{}
	for _, u := range us {
		if !slices.Contains(csServices, u.Replica.Service) || u.Replica.Index != 0 {
			continue
		}
		s := svcUsage{cpu: u.CPU}
		if p, err := procfs.NewProc(u.PID); err == nil {
			if st, err := p.Stat(); err == nil {
				s.rss = uint64(st.ResidentMemory())
			}
		}
		keep := ""
		if csProfiles != "" {
			keep = filepath.Join(csProfiles, fmt.Sprintf("%s-%d.pb.gz", u.Replica.Service, profileCount.Load()))
		}
		s.liveHeap = liveHeap(ctx, reg.AdminURL(u.Replica.Service, 0), keep)
		out[u.Replica.Service] = s
	}
	profileCount.Add(1)
	return out
}

// profileCount numbers usageOfServices' measurements in the profiles' names.
var profileCount atomic.Int64

// liveHeap makes the process at admin base URL collect (a heap profile
// with gc=1) and returns its heap in use then; 0 if it cannot tell. The
// profile is written to keep unless keep is "".
func liveHeap(ctx context.Context, base, keep string) uint64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	sink := io.Discard
	if keep != "" {
		if f, err := os.Create(keep); err == nil {
			defer f.Close()
			sink = f
		}
	}
	_, _ = io.Copy(sink, resp.Body)
	resp.Body.Close()
	fams, err := admin.ScrapeFamilies(ctx, base)
	if err != nil {
		return 0
	}
	if f := fams["go_memstats_heap_alloc_bytes"]; f != nil && len(f.Metric) > 0 {
		return uint64(f.Metric[0].GetGauge().GetValue())
	}
	return 0
}

// auditCounter counts the requests of Atoll's services in a cluster's
// audit log (testenv audits those users and no one else) from an offset.
type auditCounter struct {
	path   string
	offset int64
}

func newAuditCounter(c *testenv.Cluster) *auditCounter {
	a := &auditCounter{path: filepath.Join(c.Dir(), "logs", "audit.log")}
	if fi, err := os.Stat(a.path); err == nil {
		a.offset = fi.Size()
	}
	return a
}

// since counts the requests logged after the offset, per service user
// and verb ("<user> <verb>"), and moves the offset to the end.
func (a *auditCounter) since() (map[string]int, int, error) {
	f, err := os.Open(a.path)
	if err != nil {
		return nil, 0, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(a.offset, io.SeekStart); err != nil {
		return nil, 0, fmt.Errorf("audit log: %w", err)
	}
	users := map[string]bool{}
	for _, s := range clusters.Services {
		users[clusters.User(s)] = true
	}
	out, total := map[string]int{}, 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var n int64
	for sc.Scan() {
		n += int64(len(sc.Bytes())) + 1
		var ev struct {
			User struct{ Username string } `json:"user"`
			Verb string                    `json:"verb"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || !users[ev.User.Username] {
			continue
		}
		out[ev.User.Username+" "+ev.Verb]++
		total++
	}
	a.offset += n
	return out, total, sc.Err()
}

// csAppDoc is an App of one replica in csProject.
func csAppDoc(name string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":1,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`,
		csProject, name))
}

// csResult is one size's figures.
type csResult struct {
	pods               int
	atoll              []time.Duration
	direct             []time.Duration
	missing            int
	mutations          int // Atoll's pod creations in the window
	before, after      map[string]svcUsage
	requests           int
	requestsBy         map[string]int
	window             time.Duration
	offeredPerMin      float64
	aggregatorLiveHeap uint64
}

func (r csResult) cpuPerMutation(svc string) time.Duration {
	if r.mutations == 0 {
		return 0
	}
	return (r.after[svc].cpu - r.before[svc].cpu) / time.Duration(r.mutations)
}

// cpuShare is svc's CPU over the window in percent of a core. The
// services that do not act on the submissions (remediation, upgrade)
// spend what they spend per second whatever is submitted: their CPU per
// mutation grows with the window's length (a slower cluster takes longer
// to run the window's pods), their share of a core does not.
func (r csResult) cpuShare(svc string) float64 {
	if r.window <= 0 {
		return 0
	}
	return 100 * float64(r.after[svc].cpu-r.before[svc].cpu) / float64(r.window)
}

// BenchmarkClusterScale measures Atoll in one member cluster of csNodes
// nodes at each pod count of csPods (see the file comment).
func BenchmarkClusterScale(b *testing.B) {
	if testing.Short() {
		b.Skip("needs member clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	log := benchLogger()
	opts := region.Options{Dir: b.TempDir(), Zones: []string{"a"}, Nodes: csNodes, Logger: log,
		ClusterNice: csClusterNice, NodeProgress: os.Stdout,
		Exec: b.TempDir(), ExecLogLevel: os.Getenv("ATOLL_BENCH_LOG")}
	if err := region.BuildServices(ctx, opts.Exec); err != nil {
		b.Fatal(err)
	}
	// The region's streams and buckets reserve 3 GiB of JetStream store
	// by default, which a shared machine's disk may not spare (JetStream
	// then refuses them); this region holds a few thousand workloads.
	restore := maps.Clone(bus.DefaultMaxBytes)
	for k, v := range bus.DefaultMaxBytes {
		bus.DefaultMaxBytes[k] = v / csStoreDivisor
	}
	defer maps.Copy(bus.DefaultMaxBytes, restore)
	start := time.Now()
	fmt.Printf("\nclusterscale: starting a region with one member cluster of %d nodes\n", csNodes)
	reg, err := region.Start(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Stop(context.Background())
	fmt.Printf("  region ready after %v\n", time.Since(start).Round(time.Second))
	cl, gw := regionClient(b, reg)
	defer gw.Close()
	c := reg.Env.Clusters[0]
	nodeList, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		b.Fatal(err)
	}
	var nodes []string
	for _, n := range nodeList.Items {
		nodes = append(nodes, n.Name)
	}
	slices.Sort(nodes)
	for _, ns := range []string{csBackgroundNS, directNS} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	atollT := watchRunning(ctx, b, c, api.Namespace(csProject), api.LabelWorkload)
	directT := watchRunning(ctx, b, c, directNS, "app")
	// Warm both paths (namespace, service account) outside the clock.
	if _, err := cl.Submit(ctx, csAppDoc("warmup")); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Client.AppsV1().Deployments(directNS).Create(ctx, directDeployment("warmup"), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(ctx, b, 10*time.Minute, "the warm-up Apps Running", func() bool {
		_, a := atollT.at("warmup")
		_, d := directT.at("warmup")
		return a && d
	})
	idle := usageOfServices(ctx, b, reg)
	podsNow, background := 2, 0 // the warm-up pods
	interval := time.Minute / time.Duration(csRate)
	steps := max(2*csBlock, int(csWindow/interval))
	var results []csResult
	for si, size := range csPods {
		if size > podsNow {
			fmt.Printf("\nclusterscale: filling the cluster to %d pods\n", size)
			if err := fillBackground(ctx, c, nodes, background, background+size-podsNow); err != nil {
				b.Fatal(err)
			}
			background += size - podsNow
			podsNow = size
		}
		// Let the fill's aftermath settle before the window opens.
		time.Sleep(20 * time.Second)
		res := csResult{pods: podsNow}
		audit := newAuditCounter(c)
		res.before = usageOfServices(ctx, b, reg)
		var plan []step
		var names []string
		// Each side takes half the window's steps, the same names on both.
		half := steps / 2
		for i := 0; i < half; i += csBlock {
			for _, path := range []string{"atoll", "direct"} {
				for j := i; j < min(i+csBlock, half); j++ {
					name := fmt.Sprintf("s%d-%05d", si, j)
					if path == "atoll" {
						names = append(names, name)
						plan = append(plan, step{path: path, name: name, do: func(ctx context.Context, name string) error {
							return retryOpen(ctx, func() error {
								_, err := cl.Submit(ctx, csAppDoc(name))
								return err
							})
						}})
						continue
					}
					plan = append(plan, step{path: path, name: name, do: func(ctx context.Context, name string) error {
						_, err := c.Client.AppsV1().Deployments(directNS).Create(ctx, directDeployment(name), metav1.CreateOptions{})
						return err
					}})
				}
			}
		}
		fmt.Printf("\nclusterscale: %d pods: %d Apps through Atoll and %d Deployments direct, alternating in blocks, at %d pod creations/min\n",
			podsNow, len(names), len(plan)-len(names), csRate)
		t0 := time.Now()
		started, rate := offer(b, plan, interval)
		res.offeredPerMin = rate
		waitFor(ctx, b, 10*time.Minute, "every measured pod Running", func() bool {
			for _, n := range names {
				_, a := atollT.at(n)
				_, d := directT.at(n)
				if !a || !d {
					return false
				}
			}
			return true
		})
		res.window = time.Since(t0)
		res.after = usageOfServices(ctx, b, reg)
		res.aggregatorLiveHeap = res.after["aggregator"].liveHeap
		res.mutations = len(names)
		res.requestsBy, res.requests, err = audit.since()
		if err != nil {
			b.Logf("audit: %v", err)
		}
		for _, n := range names {
			ta, oka := atollT.at(n)
			td, okd := directT.at(n)
			if !oka || !okd {
				res.missing++
				continue
			}
			res.atoll = append(res.atoll, ta.Sub(started["atoll"][n]))
			res.direct = append(res.direct, td.Sub(started["direct"][n]))
		}
		podsNow += len(plan)
		results = append(results, res)
		printClusterScale(res, idle)
	}
	printClusterScaleSummary(b, results, idle)
}

// retryOpen calls submit again, up to 5 times a second apart, while the
// client's breaker is open (the request was not sent): on this shared
// machine admission's replies are sometimes late enough to open it. The
// submission's latency still counts from its first attempt.
func retryOpen(ctx context.Context, submit func() error) error {
	err := submit()
	for i := 0; i < 5 && errors.Is(err, gobreaker.ErrOpenState); i++ {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
		err = submit()
	}
	return err
}

// waitFor polls cond every 200 ms until it holds or timeout; not fatal:
// the report says what did not finish.
func waitFor(ctx context.Context, b *testing.B, timeout time.Duration, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			b.Errorf("%s: not within %v", what, timeout)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

func printClusterScale(r csResult, idle map[string]svcUsage) {
	a50, a99 := percentile(r.atoll, .50), percentile(r.atoll, .99)
	d50, d99 := percentile(r.direct, .50), percentile(r.direct, .99)
	fmt.Printf("  offered %.0f/min; window %v; %d of %d Apps missing on either side\n", r.offeredPerMin, r.window.Round(time.Second), r.missing, r.mutations)
	fmt.Printf("  %-36s %10s %10s\n", "", "P50", "P99")
	fmt.Printf("  %-36s %10v %10v\n", "Atoll submit -> Running", a50.Round(time.Millisecond), a99.Round(time.Millisecond))
	fmt.Printf("  %-36s %10v %10v\n", "direct client-go create -> Running", d50.Round(time.Millisecond), d99.Round(time.Millisecond))
	fmt.Printf("  %-36s %10.2f %10.2f   (target P99 <= 25s and <= 1.10x)\n", "ratio Atoll / direct", ratio(a50, d50), ratio(a99, d99))
	fmt.Printf("  %-12s %12s %12s %14s %12s\n", "service", "RSS MiB", "live heap MiB", "CPU ms/mutation", "CPU % core")
	for _, s := range csServices {
		fmt.Printf("  %-12s %12.1f %12.1f %14.2f %12.1f\n", s, mib(r.after[s].rss), mib(r.after[s].liveHeap), float64(r.cpuPerMutation(s).Microseconds())/1000, r.cpuShare(s))
	}
	if r.pods > 0 {
		fmt.Printf("  aggregator live heap per pod of the cluster: %.0f B (over its heap with %d nodes and no pods: %.0f B)\n",
			float64(r.aggregatorLiveHeap)/float64(r.pods), csNodes, float64(int64(r.aggregatorLiveHeap)-int64(idle["aggregator"].liveHeap))/float64(r.pods))
	}
	if r.mutations > 0 {
		fmt.Printf("  member API server requests by Atoll's services: %d, %.2f per mutation\n", r.requests, float64(r.requests)/float64(r.mutations))
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range r.requestsBy {
				if !yield(k) {
					return
				}
			}
		})
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", strings.TrimPrefix(k, "atoll-"), r.requestsBy[k]))
		}
		fmt.Printf("    %s\n", strings.Join(parts, ", "))
	}
}

func printClusterScaleSummary(b *testing.B, rs []csResult, idle map[string]svcUsage) {
	if len(rs) == 0 {
		return
	}
	fmt.Printf("\nclusterscale: %d nodes; with no pods the aggregator's live heap is %.1f MiB (%.0f B per node, all else included)\n",
		csNodes, mib(idle["aggregator"].liveHeap), float64(idle["aggregator"].liveHeap)/float64(csNodes))
	fmt.Printf("  %-8s %10s %10s %10s %10s %8s %12s %12s %12s %10s\n", "pods", "Atoll P50", "Atoll P99", "direct P99", "P99 ratio", "req/mut", "agg B/pod", "agg ms/mut", "prop ms/mut", "agg RSS")
	for _, r := range rs {
		a99, d99 := percentile(r.atoll, .99), percentile(r.direct, .99)
		fmt.Printf("  %-8d %10v %10v %10v %10.2f %8.2f %12.0f %12.2f %12.2f %9.0fM\n", r.pods,
			percentile(r.atoll, .5).Round(time.Millisecond), a99.Round(time.Millisecond), d99.Round(time.Millisecond), ratio(a99, d99),
			float64(r.requests)/float64(max(1, r.mutations)), float64(r.aggregatorLiveHeap)/float64(r.pods),
			float64(r.cpuPerMutation("aggregator").Microseconds())/1000, float64(r.cpuPerMutation("propagator").Microseconds())/1000, mib(r.after["aggregator"].rss))
	}
	first, last := rs[0], rs[len(rs)-1]
	if len(rs) > 1 && last.pods > first.pods {
		marginal := float64(int64(last.aggregatorLiveHeap)-int64(first.aggregatorLiveHeap)) / float64(last.pods-first.pods)
		fmt.Printf("  aggregator: marginal live heap per pod between %d and %d pods: %.0f B\n", first.pods, last.pods, marginal)
		bpp := func(r csResult) float64 { return float64(r.aggregatorLiveHeap) / float64(r.pods) }
		fmt.Printf("  %d vs %d pods: aggregator bytes per pod %.2fx (target <= 1.2x)\n", last.pods, first.pods, bpp(last)/bpp(first))
		for _, s := range csServices {
			fmt.Printf("  %d vs %d pods: %s CPU per mutation %.2fx (target <= 1.2x), share of a core %.2fx (windows %v, %v)\n", last.pods, first.pods, s,
				ratio(last.cpuPerMutation(s), first.cpuPerMutation(s)), last.cpuShare(s)/max(first.cpuShare(s), 1e-9),
				first.window.Round(time.Second), last.window.Round(time.Second))
		}
	}
	b.ReportMetric(float64(percentile(last.atoll, .99).Milliseconds()), "running-p99-ms")
	b.ReportMetric(ratio(percentile(last.atoll, .99), percentile(last.direct, .99)), "p99-ratio")
}
