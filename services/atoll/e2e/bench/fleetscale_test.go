package bench

// The fleet-scale benchmark: do remediation and upgrade hold at the size
// of a large member cluster? (issue 36, point 3)
//
// For each size of ATOLL_FLEET_NODES (ascending, default 300 and 3,000:
// the first is the baseline), a fresh region with one member cluster
// (zone a) of that many KWOK nodes, all in the region's pool "general",
// every service its own process (region.Options.Exec) and the NATS
// server a nats-server process (NATSExec), so that each one's CPU and
// resident memory are its own. No pods: what is measured is the two
// services' work per node, not the drains' (a drain of an empty node is
// one list). Each size runs two phases in the same region.
//
//  1. Remediation. The policy (fleetPolicy) acts within seconds: a node
//     Ready=False for 3 s is cordoned, drained and replaced. ATOLL_FLEET_FAILING
//     percent of the nodes (default 1: 3 of 300, 30 of 3,000; at least
//     one), spread over the cluster, go NotReady at once, the way the
//     remediation e2e tests break a node (a first Ready=False entry and a
//     later Ready=True one that keeps KWOK from healing it). Nothing in
//     the policy may hold them back, so that what is timed is the
//     service: the storm breaker's MaxUnhealthy is twice the failing share
//     (2% by default, 60 of 3,000: the breaker opens only past it, and
//     the default 30% would let them through too), the token bucket gives
//     a burst of as many actions as there are broken nodes (ActionBurst;
//     the default is one new action per 30 s, which would take 15 minutes
//     for 30 nodes), and the disruption budget of the pool and of the
//     cluster is that count (the default, one node per pool, would
//     remediate them one after the other). Per broken node the bench
//     times break -> each event the service publishes (unhealthy,
//     cordoned, draining, drained, replacing, replaced: the event's own
//     time, stamped when the service decided), and checks that each was
//     replaced exactly once (one replaced event, the node gone, one node
//     labelled as its replacement) and that no other node was acted on.
//     Before the break it measures the service's CPU at rest over
//     fleetIdle (its informer follows every node's heartbeat and it
//     steps every node each second), then its CPU over the phase per
//     remediated node, at rest included (CPU ms per decision) and above
//     the rest rate.
//  2. Rotation. A plan (Soak 1 s; the upgrade service's tick
//     ATOLL_FLEET_TICK, default 250 ms as in the upgrade e2e tests, through
//     upgrade.EnvTick) rotates pool general in waves of maxUnavailable 10%
//     and maxSurge 10% (30 + 30 nodes of 300, 300 + 300 of 3,000: five
//     waves at any size; ReadyTimeout and the drain deadline at their
//     defaults). The plan is written with an operator's pause first:
//     held, it starts nothing, but each tick still reads the cluster's
//     nodes and Pending pods (a list of each, every tick, before the
//     service kept informers) and the bench measures that fixed cost over
//     fleetIdle (the upgrade process's CPU per tick, its member API
//     requests, and the member API server's CPU above its rate at rest:
//     noisy, within some 10% of a core on a shared machine). Then
//     the pause is lifted and the bench times the rotation to Done, each
//     wave (upgrade-wave-started -> upgrade-wave-soaking), the upgrade
//     process's and the nats-server's CPU, the upgrade service's requests
//     to the member API server (its audit log) and resident memory. A
//     node informer of the bench's own (not a list every 200 ms, which at
//     3,000 nodes would load the API server itself) samples the pool
//     every fleetSample: nodes out of service are the pool's size less
//     its Ready, schedulable, undeleted nodes; the informer's cache
//     passes through the API server's states in order, so every sample is
//     a state the cluster was in. Every sample must be within the wave's
//     max unavailable (plan.MaxUnavailable of the pool's size), every node
//     of the plan must end NodeDone and the pool must end with its size,
//     every node on the target version and schedulable. A progress
//     whose stored revision stops moving for two minutes (the service
//     can no longer write it) ends the wait, with the end of the upgrade
//     process's log.
//
// At the end a table of both phases per size and the ratios of the
// largest size to the baseline: CPU per decision and per rotated node
// (flat is the target: the work per node should not grow with the
// fleet) and resident memory per node. ATOLL_FLEET_PROFILE, a directory,
// takes a 30 s CPU profile of the upgrade process and the nats-server at
// the start of each rotation.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/procfs"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/disruption"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/region"
	rem "atoll.dev/services/remediation"
	"atoll.dev/services/upgrade"
	"atoll.dev/services/upgrade/plan"
)

// Fleet-scale parameters, from the environment.
var (
	// fleetSizes are the member cluster's node counts, ascending; the
	// first is the baseline.
	fleetSizes = envSizes("ATOLL_FLEET_NODES", []int{300, 3000})
	// fleetFailingPct is the percentage of nodes broken at once.
	fleetFailingPct = envInt("ATOLL_FLEET_FAILING", 1)
	// fleetTick is the upgrade service's tick (upgrade.EnvTick).
	fleetTick = envDuration("ATOLL_FLEET_TICK", 250*time.Millisecond)
	// fleetRotateMinutes bounds a rotation (ATOLL_FLEET_ROTATE_MINUTES;
	// 0: 10 minutes plus 400 ms a node).
	fleetRotateMinutes = envInt("ATOLL_FLEET_ROTATE_MINUTES", 0)
	// fleetProfileDir, when set, receives CPU profiles of each rotation.
	fleetProfileDir = os.Getenv("ATOLL_FLEET_PROFILE")
	// fleetClusterNice is the member cluster's CPU priority.
	fleetClusterNice = envNice("ATOLL_FLEET_CLUSTER_NICE", 0)
)

const (
	// fleetPool is the region's pool: every node of the cluster.
	fleetPool = "general"
	// fleetPlan is the rotation plan's name.
	fleetPlan = "fleet"
	// fleetLabel and fleetVersion are the rotation's target.
	fleetLabel   = "atoll.dev/node-version"
	fleetVersion = "v2"
	// fleetSample is how often the pool's nodes out of service are sampled.
	fleetSample = 200 * time.Millisecond
	// fleetIdle is the window of each at-rest measurement.
	fleetIdle = 10 * time.Second
	// fleetProfile is the length of a rotation's CPU profile.
	fleetProfile = 30 * time.Second
)

// fleetWave is the rotation's wave shape.
var fleetWave = plan.PoolStep{Name: fleetPool, MaxUnavailable: "10%", MaxSurge: "10%"}

// remediationEvents are the events of a remediated node, in order.
var remediationEvents = []string{rem.EvUnhealthy, rem.EvCordoned, rem.EvDraining, rem.EvDrained, rem.EvReplacing, rem.EvReplaced}

func envDuration(k string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(k)); err == nil && d > 0 {
		return d
	}
	return def
}

// failingOf is how many of n nodes break: fleetFailingPct percent,
// rounded down, at least one.
func failingOf(n int) int { return max(1, n*fleetFailingPct/100) }

// fleetPolicy lets failing broken nodes be remediated at once, each
// step within seconds (see the file comment).
func fleetPolicy(failing int) rem.Policy {
	s := rem.Steps{
		Conditions: []rem.Condition{{Type: corev1.NodeReady, Statuses: []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionUnknown}, For: rem.Duration(3 * time.Second)}},
		DrainRetry: rem.Duration(time.Second), DrainRetryMax: rem.Duration(4 * time.Second),
		DrainDeadline: rem.Duration(time.Minute), DrainPolicy: rem.DrainStop,
		PodGracePeriod: ptr.To(rem.Duration(time.Second)), SkipWaitForDelete: rem.Duration(3 * time.Second),
		ReplaceTimeout: rem.Duration(10 * time.Minute), ReplaceAttempts: 2,
	}
	budget := disruption.Limit(strconv.Itoa(failing))
	return rem.Policy{Steps: s, FlapTransitions: 4, FlapWindow: rem.Duration(time.Minute),
		MaxUnhealthy: disruption.Limit(fmt.Sprintf("%d%%", min(100, 2*fleetFailingPct))), Cooldown: rem.Duration(10 * time.Second),
		ActionEvery: rem.Duration(10 * time.Millisecond), ActionBurst: failing,
		Budget: disruption.Budget{Pool: budget, Cluster: budget}, LeaseTTL: rem.Duration(2 * time.Minute)}
}

// nodeEvents records the remediation events of a cluster's nodes: per
// node, per event, the event's times (deduplicated by node UID and seq).
type nodeEvents struct {
	mu   sync.Mutex
	seen map[string]bool
	at   map[string]map[string][]time.Time
}

func watchNodeEvents(b *testing.B, reg *region.Region, cluster string) (*nodeEvents, *nats.Subscription) {
	b.Helper()
	e := &nodeEvents{seen: map[string]bool{}, at: map[string]map[string][]time.Time{}}
	sub, err := reg.Bus.NC.Subscribe(bus.NodeSubject(cluster, "*", "*"), func(m *nats.Msg) {
		var ev rem.NodeEvent
		if json.Unmarshal(m.Data, &ev) != nil {
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		k := ev.UID + "/" + strconv.Itoa(ev.Seq) + "/" + ev.Time.String()
		if e.seen[k] {
			return
		}
		e.seen[k] = true
		if e.at[ev.Node] == nil {
			e.at[ev.Node] = map[string][]time.Time{}
		}
		e.at[ev.Node][ev.Event] = append(e.at[ev.Node][ev.Event], ev.Time)
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := reg.Bus.NC.Flush(); err != nil {
		b.Fatal(err)
	}
	return e, sub
}

// first is when node first had event, and whether it had it.
func (e *nodeEvents) first(node, event string) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ts := e.at[node][event]
	if len(ts) == 0 {
		return time.Time{}, false
	}
	return ts[0], true
}

func (e *nodeEvents) count(node, event string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.at[node][event])
}

// nodes are the nodes with any event.
func (e *nodeEvents) nodes() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.at))
	for n := range e.at {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// outOfService samples, every fleetSample, a pool's nodes out of service
// (its size less its Ready, schedulable, undeleted nodes) from an
// informer's cache.
type outOfService struct {
	size, allowed int
	mu            sync.Mutex
	samples, over int
	most          int
	firstOver     string
	fac           informers.SharedInformerFactory
	stop, done    chan struct{} // stop also stops the informer
}

func sampleOutOfService(ctx context.Context, b *testing.B, c *testenv.Cluster, pool string, size, allowed int) *outOfService {
	b.Helper()
	fac := informers.NewSharedInformerFactoryWithOptions(c.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = testenv.LabelPool + "=" + pool }))
	inf := fac.Core().V1().Nodes().Informer()
	if err := inf.SetTransform(clusters.SlimNode); err != nil {
		b.Fatal(err)
	}
	lister := fac.Core().V1().Nodes().Lister()
	s := &outOfService{size: size, allowed: allowed, fac: fac, stop: make(chan struct{}), done: make(chan struct{})}
	fac.Start(s.stop)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cacheSynced(sctx, fac) {
		close(s.stop)
		b.Fatal("node informer: not synced within 2m")
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(fleetSample)
		defer tick.Stop()
		for {
			s.observe(lister)
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func cacheSynced(ctx context.Context, fac informers.SharedInformerFactory) bool {
	for _, ok := range fac.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return false
		}
	}
	return true
}

func (s *outOfService) observe(l corelisters.NodeLister) {
	list, err := l.List(labels.Everything())
	if err != nil {
		return
	}
	up, cordoned := 0, 0
	for _, n := range list {
		switch {
		case n.DeletionTimestamp != nil || !disruption.Ready(n):
		case n.Spec.Unschedulable:
			cordoned++
		default:
			up++
		}
	}
	out := s.size - up
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	s.most = max(s.most, out)
	if out > s.allowed {
		s.over++
		if s.firstOver == "" {
			s.firstOver = fmt.Sprintf("%d out of service (%d nodes, %d up, %d cordoned) at %s", out, len(list), up, cordoned, time.Now().Format("15:04:05.000"))
		}
	}
}

// end stops the sampling and the informer.
func (s *outOfService) end() {
	close(s.stop)
	<-s.done
	s.fac.Shutdown()
}

// apiServerPID is the member cluster's kube-apiserver process, 0 if not
// found.
func apiServerPID(c *testenv.Cluster) int {
	for _, pid := range c.Processes() {
		if p, err := procfs.NewProc(pid); err == nil {
			if comm, err := p.Comm(); err == nil && comm == "kube-apiserver" {
				return pid
			}
		}
	}
	return 0
}

// processCPU is pid's CPU time so far, 0 if it cannot be read.
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	d, _ := region.ProcessCPU(pid)
	return d
}

// fleetResult is one size's figures.
type fleetResult struct {
	nodes, failing int

	// Remediation.
	remAtRest    float64                    // the service's CPU at rest, cores
	apiAtRest    float64                    // the member API server's CPU at rest, cores
	remLatency   map[string][]time.Duration // by event: break -> event
	replaced     int                        // broken nodes replaced exactly once
	remWindow    time.Duration              // break -> every broken node replaced
	remCPU       time.Duration              // the service's CPU over remWindow
	remRSS       uint64
	remHeap      uint64
	remBreaker   string // the policy's MaxUnhealthy
	remOthers    []string
	remRequests  map[string]int // the service's member API requests over remWindow
	remNATS      time.Duration  // the nats-server's CPU over remWindow
	remBreakTook time.Duration  // the breaks' own updates, all of them

	// Rotation.
	heldUpgrade  time.Duration // the upgrade process's CPU per tick, the plan held
	heldAPI      float64       // the member API server's CPU above its rate at rest, the plan held, cores
	heldRequests map[string]int
	rotWindow    time.Duration
	rotated      int
	waves        []time.Duration
	allowed      int
	most         int
	samples      int
	over         int
	upCPU        time.Duration
	upNATS       time.Duration
	upRSS        uint64
	upHeap       uint64
	upRequests   map[string]int
	progressSize int // bytes of the plan's stored progress at the end
}

func (r fleetResult) remCPUPerDecision() time.Duration {
	return r.remCPU / time.Duration(max(1, r.replaced))
}

// remAboveRest is the CPU per decision above the service's rate at rest.
func (r fleetResult) remAboveRest() time.Duration {
	extra := r.remCPU - time.Duration(r.remAtRest*float64(r.remWindow))
	return extra / time.Duration(max(1, r.replaced))
}

func (r fleetResult) meanWave() time.Duration {
	var sum time.Duration
	for _, w := range r.waves {
		sum += w
	}
	return sum / time.Duration(max(1, len(r.waves)))
}

func (r fleetResult) upCPUPerNode() time.Duration {
	return r.upCPU / time.Duration(max(1, r.rotated))
}

// BenchmarkFleetScale measures remediation and rotation in one member
// cluster of each size of fleetSizes (see the file comment).
func BenchmarkFleetScale(b *testing.B) {
	if testing.Short() {
		b.Skip("needs member clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Hour)
	defer cancel()
	execDir := b.TempDir()
	if err := region.BuildServices(ctx, execDir); err != nil {
		b.Fatal(err)
	}
	natsBin, err := region.BuildNATSServer(ctx, execDir)
	if err != nil {
		b.Fatal(err)
	}
	var results []fleetResult
	for _, n := range fleetSizes {
		res, ok := fleetRun(ctx, b, execDir, natsBin, n)
		results = append(results, res)
		printFleet(res)
		if !ok {
			break
		}
	}
	printFleetSummary(b, results)
}

// fleetRun runs both phases in a fresh region of n nodes; false when the
// region did not start.
func fleetRun(ctx context.Context, b *testing.B, execDir, natsBin string, n int) (fleetResult, bool) {
	res := fleetResult{nodes: n, failing: failingOf(n)}
	opts := region.Options{Dir: b.TempDir(), Zones: []string{"a"}, Nodes: n, Logger: benchLogger(),
		ClusterNice: fleetClusterNice, NodeProgress: os.Stdout,
		Exec: execDir, NATSExec: natsBin, ExecLogLevel: os.Getenv("ATOLL_BENCH_LOG"),
		ExecEnv: []string{upgrade.EnvTick + "=" + fleetTick.String()}}
	start := time.Now()
	fmt.Printf("\nfleetscale: starting a region with one member cluster of %d nodes\n", n)
	reg, err := region.Start(ctx, opts)
	if err != nil {
		b.Errorf("region of %d nodes: %v", n, err)
		return res, false
	}
	defer func() {
		if err := reg.Stop(context.Background()); err != nil {
			b.Logf("stop region: %v", err)
		}
	}()
	fmt.Printf("  region ready after %v\n", time.Since(start).Round(time.Second))
	// Let the start's aftermath (the informers' first lists, KWOK's
	// first heartbeats) settle before anything is measured.
	time.Sleep(20 * time.Second)
	c := reg.Env.Clusters[0]
	remediate(ctx, b, reg, c, &res)
	rotate(ctx, b, reg, c, &res, filepath.Join(opts.Dir, "logs", "upgrade-0.log"))
	return res, true
}

// atRest measures, over fleetIdle, each cluster-facing service's CPU
// and the member API server's, in cores.
func atRest(ctx context.Context, b *testing.B, reg *region.Region, api int) (map[string]float64, float64) {
	b.Helper()
	u0, a0, t0 := usageOfServices(ctx, b, reg), processCPU(api), time.Now()
	time.Sleep(fleetIdle) // the window at rest is the measurement
	u1, a1, d := usageOfServices(ctx, b, reg), processCPU(api), time.Since(t0)
	out := map[string]float64{}
	for s, u := range u1 {
		out[s] = float64(u.cpu-u0[s].cpu) / float64(d)
	}
	return out, float64(a1-a0) / float64(d)
}

// remediate breaks failingOf(n) nodes at once and follows their
// remediation to the end.
func remediate(ctx context.Context, b *testing.B, reg *region.Region, c *testenv.Cluster, res *fleetResult) {
	b.Helper()
	p := fleetPolicy(res.failing)
	res.remBreaker = string(p.MaxUnhealthy)
	kv, err := reg.Bus.KV(ctx, bus.BucketRemediation)
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(p)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := kv.Put(ctx, rem.KeyPolicy, body); err != nil {
		b.Fatal(err)
	}
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for _, nd := range list.Items {
		names = append(names, nd.Name)
	}
	slices.Sort(names)
	// Spread over the cluster: one node in every len/failing.
	step := len(names) / res.failing
	victims := make([]string, 0, res.failing)
	for i := range res.failing {
		victims = append(victims, names[i*step+step/2])
	}
	evs, sub := watchNodeEvents(b, reg, c.Name)
	defer func() { _ = sub.Unsubscribe() }()

	api := apiServerPID(c)
	rest, apiRest := atRest(ctx, b, reg, api)
	res.remAtRest, res.apiAtRest = rest["remediation"], apiRest
	fmt.Printf("\nfleetscale: %d nodes: at rest, remediation uses %.1f%% of a core, upgrade %.1f%%, the member API server %.1f%%\n",
		res.nodes, 100*rest["remediation"], 100*rest["upgrade"], 100*apiRest)

	fmt.Printf("fleetscale: %d nodes: breaking %d at once (policy: NotReady for 3s; breaker at %s; burst %d; budget %s)\n",
		res.nodes, len(victims), p.MaxUnhealthy, p.ActionBurst, p.Budget.Pool)
	audit := newAuditCounter(c)
	before, nats0 := usageOfServices(ctx, b, reg), processCPU(reg.NATSPID())
	start := time.Now()
	var mu sync.Mutex
	broke := map[string]time.Time{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, v := range victims {
		g.Go(func() error {
			if err := testenv.BreakNode(gctx, c.Client, v); err != nil {
				return fmt.Errorf("break %s: %w", v, err)
			}
			mu.Lock()
			broke[v] = time.Now()
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	res.remBreakTook = time.Since(start)
	waitFor(ctx, b, 5*time.Minute, "every broken node replaced", func() bool {
		for _, v := range victims {
			if _, ok := evs.first(v, rem.EvReplaced); !ok {
				if _, stuck := evs.first(v, rem.EvNeedsHuman); !stuck {
					return false
				}
			}
		}
		return true
	})
	res.remWindow = time.Since(start)
	after, nats1 := usageOfServices(ctx, b, reg), processCPU(reg.NATSPID())
	res.remCPU = after["remediation"].cpu - before["remediation"].cpu
	res.remRSS, res.remHeap = after["remediation"].rss, after["remediation"].liveHeap
	res.remNATS = nats1 - nats0
	if res.remRequests, _, err = audit.since(); err != nil {
		b.Logf("audit: %v", err)
	}

	res.remLatency = map[string][]time.Duration{}
	for _, v := range victims {
		for _, ev := range remediationEvents {
			if t, ok := evs.first(v, ev); ok {
				res.remLatency[ev] = append(res.remLatency[ev], t.Sub(broke[v]))
			}
		}
		if n := evs.count(v, rem.EvReplaced); n == 1 {
			res.replaced++
		} else {
			b.Errorf("%s: replaced %d times, want once; needs-human %d", v, n, evs.count(v, rem.EvNeedsHuman))
		}
	}
	for _, nd := range evs.nodes() {
		if !slices.Contains(victims, nd) {
			res.remOthers = append(res.remOthers, nd)
			if evs.count(nd, rem.EvCordoned) > 0 {
				b.Errorf("%s: cordoned, but it was not broken", nd)
			}
		}
	}
	// The cluster agrees: every broken node gone, exactly one node made
	// to replace each.
	list, err = c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	replacements := map[string]int{}
	for _, nd := range list.Items {
		if slices.Contains(victims, nd.Name) {
			b.Errorf("%s: still in the cluster", nd.Name)
		}
		if r := nd.Labels[disruption.LabelReplaces]; r != "" {
			replacements[r]++
		}
	}
	for _, v := range victims {
		if replacements[v] != 1 {
			b.Errorf("%s: %d replacement nodes, want 1", v, replacements[v])
		}
	}
	if len(list.Items) != res.nodes {
		b.Errorf("the cluster ends with %d nodes, want %d", len(list.Items), res.nodes)
	}
}

// rotate rotates every node of the cluster (pool general) and samples
// the nodes out of service throughout; upgradeLog is the upgrade
// process's log, whose end is shown when the rotation does not finish.
func rotate(ctx context.Context, b *testing.B, reg *region.Region, c *testenv.Cluster, res *fleetResult, upgradeLog string) {
	b.Helper()
	kv, err := reg.Bus.KV(ctx, bus.BucketUpgrade)
	if err != nil {
		b.Fatal(err)
	}
	put := func(key string, v any) {
		body, err := json.Marshal(v)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, body); err != nil {
			b.Fatal(err)
		}
	}
	// progress reads the plan's progress, its size and its revision.
	progress := func() (plan.Progress, int, uint64) {
		var p plan.Progress
		e, err := kv.Get(ctx, upgrade.ProgressKey(fleetPlan))
		if err != nil {
			return p, 0, 0
		}
		if b, err := bus.Inflate(e.Value()); err == nil {
			_ = json.Unmarshal(b, &p)
		}
		return p, len(e.Value()), e.Revision()
	}
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.LabelPool + "=" + fleetPool})
	if err != nil {
		b.Fatal(err)
	}
	size := len(list.Items)
	res.allowed, err = plan.MaxUnavailable(fleetWave.MaxUnavailable, size)
	if err != nil {
		b.Fatal(err)
	}
	surge, _ := plan.MaxSurge(fleetWave.MaxSurge, size)
	// ReadyTimeout is the default (10m): on a loaded 2-core machine KWOK
	// took about two minutes to make a wave's 600 replacements Ready, and
	// a timeout of 2m paused the plan of 3,000 nodes.
	spec := plan.Spec{Name: fleetPlan, Target: plan.Target{Label: fleetLabel, Value: fleetVersion},
		Soak:     plan.Duration{Duration: time.Second},
		Clusters: []plan.ClusterStep{{Name: c.Name, Pools: []plan.PoolStep{fleetWave}}}}

	// Held: the plan starts nothing, but every tick still lists the
	// cluster's nodes and Pending pods.
	put(upgrade.ControlKey(fleetPlan), plan.Control{Pause: true, Reason: "bench: measuring a held plan"})
	put(upgrade.SpecKey(fleetPlan), spec)
	waitFor(ctx, b, time.Minute, "the plan held", func() bool {
		p, _, _ := progress()
		return p.Phase == plan.PhasePaused
	})
	api := apiServerPID(c)
	audit := newAuditCounter(c)
	held, apiHeld := atRest(ctx, b, reg, api)
	res.heldUpgrade = time.Duration(held["upgrade"] * float64(fleetTick))
	res.heldAPI = apiHeld - res.apiAtRest
	if res.heldRequests, _, err = audit.since(); err != nil {
		b.Logf("audit: %v", err)
	}
	fmt.Printf("\nfleetscale: %d nodes: plan held: upgrade uses %.1f%% of a core (%.1f ms a tick of %v), the member API server %.1f%% (%+.1f%% over its rest)\n",
		res.nodes, 100*held["upgrade"], ms64(res.heldUpgrade), fleetTick, 100*apiHeld, 100*res.heldAPI)
	fmt.Printf("  upgrade's requests over %v held: %s\n", fleetIdle, requestsOf(res.heldRequests, "upgrade"))

	fmt.Printf("fleetscale: %d nodes: rotating pool %s of %d nodes, waves of %d unavailable + %d surge, soak %v, tick %v\n",
		res.nodes, fleetPool, size, res.allowed, surge, spec.Soak.Duration, fleetTick)
	s := sampleOutOfService(ctx, b, c, fleetPool, size, res.allowed)
	var wmu sync.Mutex
	waveEvents := map[string][]time.Time{}
	sub, err := reg.Bus.NC.Subscribe(bus.ClusterSubject(c.Name, "*"), func(m *nats.Msg) {
		var ev struct{ Plan, Event string }
		if json.Unmarshal(m.Data, &ev) == nil && ev.Plan == fleetPlan {
			wmu.Lock()
			waveEvents[ev.Event] = append(waveEvents[ev.Event], time.Now())
			wmu.Unlock()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	audit = newAuditCounter(c)
	before, nats0 := usageOfServices(ctx, b, reg), processCPU(reg.NATSPID())
	start := time.Now()
	put(upgrade.ControlKey(fleetPlan), plan.Control{})
	var profiled func()
	if fleetProfileDir != "" {
		profiled = profileRotation(reg, res.nodes)
	}
	timeout := 10*time.Minute + time.Duration(size)*400*time.Millisecond
	if fleetRotateMinutes > 0 {
		timeout = time.Duration(fleetRotateMinutes) * time.Minute
	}
	// The plan's own events say when it ends (done, or paused by a node
	// or the gate): polling its progress, a value of up to a megabyte,
	// would load the NATS server measured here. It is read every 30 s
	// for the log.
	ended := func() bool {
		wmu.Lock()
		defer wmu.Unlock()
		return len(waveEvents[plan.EvPlanDone]) > 0 || len(waveEvents[plan.EvPaused]) > 0
	}
	// Every tick stores the progress: a revision unchanged for
	// fleetStall means the service cannot store it any more.
	const fleetStall = 2 * time.Minute
	last, lastRev, revAt, stalled := time.Now(), uint64(0), time.Now(), false
	waitFor(ctx, b, timeout, "the rotation done", func() bool {
		if time.Since(last) >= 30*time.Second {
			last = time.Now()
			p, n, rev := progress()
			if rev != lastRev {
				lastRev, revAt = rev, time.Now()
			} else if time.Since(revAt) >= fleetStall {
				stalled = true
			}
			done := 0
			for _, nd := range p.Nodes {
				if nd.State == plan.NodeDone {
					done++
				}
			}
			s.mu.Lock()
			most := s.most
			s.mu.Unlock()
			fmt.Printf("  %v: %s wave %d, %d of %d nodes done, %d in flight; progress %d KiB; most out of service %d (allowed %d) %s\n",
				time.Since(start).Round(time.Second), p.Phase, p.Wave, done, size, len(p.InFlight()), n>>10, most, res.allowed, p.Reason)
		}
		return ended() || stalled
	})
	res.rotWindow = time.Since(start)
	if stalled {
		b.Errorf("the plan's progress unchanged for %v; the end of %s:\n%s", fleetStall, filepath.Base(upgradeLog), tail(upgradeLog, 10))
	}
	after, nats1 := usageOfServices(ctx, b, reg), processCPU(reg.NATSPID())
	s.end()
	if profiled != nil {
		profiled()
	}
	res.upCPU = after["upgrade"].cpu - before["upgrade"].cpu
	res.upRSS, res.upHeap = after["upgrade"].rss, after["upgrade"].liveHeap
	res.upNATS = nats1 - nats0
	if res.upRequests, _, err = audit.since(); err != nil {
		b.Logf("audit: %v", err)
	}
	s.mu.Lock()
	res.samples, res.over, res.most = s.samples, s.over, s.most
	if s.over > 0 {
		b.Errorf("%d of %d samples over the max unavailable of %d; the first: %s", s.over, s.samples, s.allowed, s.firstOver)
	}
	s.mu.Unlock()
	wmu.Lock()
	started, soaked := waveEvents[plan.EvWaveStarted], waveEvents[plan.EvWaveSoaking]
	for i := range min(len(started), len(soaked)) {
		res.waves = append(res.waves, soaked[i].Sub(started[i]))
	}
	wmu.Unlock()

	p, n, _ := progress()
	res.progressSize = n
	if p.Phase != plan.PhaseDone {
		b.Errorf("plan %s: %s: %s", fleetPlan, p.Phase, p.Reason)
	}
	var notDone []string
	for _, nd := range p.Nodes {
		if nd.State == plan.NodeDone {
			res.rotated++
		} else {
			notDone = append(notDone, fmt.Sprintf("%s %s %s", nd.Name, nd.State, nd.Why))
		}
	}
	if len(notDone) > 0 {
		sort.Strings(notDone)
		b.Errorf("%d nodes of the plan not done, e.g. %s", len(notDone), notDone[0])
	}
	if res.rotated != size {
		b.Errorf("%d nodes rotated, want %d", res.rotated, size)
	}
	list, err = c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.LabelPool + "=" + fleetPool})
	if err != nil {
		b.Fatal(err)
	}
	if len(list.Items) != size {
		b.Errorf("pool %s ends with %d nodes, want %d", fleetPool, len(list.Items), size)
	}
	old, cordoned := 0, 0
	for _, nd := range list.Items {
		if nd.Labels[fleetLabel] != fleetVersion {
			old++
		}
		if nd.Spec.Unschedulable {
			cordoned++
		}
	}
	if old > 0 || cordoned > 0 {
		b.Errorf("pool %s ends with %d nodes not on %s and %d cordoned", fleetPool, old, fleetVersion, cordoned)
	}
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// profileRotation takes a CPU profile of fleetProfile from the upgrade
// process and the nats-server into fleetProfileDir; the returned
// function waits for both.
func profileRotation(reg *region.Region, n int) func() {
	if err := os.MkdirAll(fleetProfileDir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "profile: %v\n", err)
		return func() {}
	}
	var wg sync.WaitGroup
	urls := map[string]string{"upgrade": reg.AdminURL("upgrade", 0), "nats-server": reg.NATSProfURL()}
	for who, base := range urls {
		if base == "" {
			continue
		}
		wg.Go(func() {
			url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, int(fleetProfile/time.Second))
			path := filepath.Join(fleetProfileDir, fmt.Sprintf("fleet-%d-%s.pprof", n, who))
			if err := fetchTo(url, path); err != nil {
				fmt.Fprintf(os.Stderr, "profile %s: %v\n", who, err)
			}
		})
	}
	return wg.Wait
}

// requestsOf formats the member API requests of one service's user by
// verb ("list 40, get 2").
func requestsOf(reqs map[string]int, service string) string {
	user := clusters.User(service) + " "
	var parts []string
	total := 0
	for _, k := range slices.Sorted(maps.Keys(reqs)) {
		if verb, ok := strings.CutPrefix(k, user); ok {
			parts = append(parts, fmt.Sprintf("%s %d", verb, reqs[k]))
			total += reqs[k]
		}
	}
	if total == 0 {
		return "none"
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

func ms64(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func printFleet(r fleetResult) {
	fmt.Printf("\nfleetscale: %d nodes, remediation of %d broken at once (breaks took %v; breaker %s)\n",
		r.nodes, r.failing, r.remBreakTook.Round(time.Millisecond), r.remBreaker)
	fmt.Printf("  %-24s %10s %10s %10s %6s\n", "break ->", "P50", "P99", "max", "n")
	for _, ev := range remediationEvents {
		ds := r.remLatency[ev]
		fmt.Printf("  %-24s %10v %10v %10v %6d\n", ev, percentile(ds, .5).Round(time.Millisecond),
			percentile(ds, .99).Round(time.Millisecond), percentile(ds, 1).Round(time.Millisecond), len(ds))
	}
	fmt.Printf("  replaced exactly once: %d of %d; other nodes with events: %d\n", r.replaced, r.failing, len(r.remOthers))
	fmt.Printf("  window %v: remediation CPU %.2fs (%.1f ms per decision; %.1f ms above its rest rate of %.1f%% of a core), RSS %.1f MiB, live heap %.1f MiB; nats-server CPU %.2fs\n",
		r.remWindow.Round(time.Millisecond), r.remCPU.Seconds(), ms64(r.remCPUPerDecision()), ms64(r.remAboveRest()), 100*r.remAtRest,
		mib(r.remRSS), mib(r.remHeap), r.remNATS.Seconds())
	fmt.Printf("  remediation's member API requests: %s\n", requestsOf(r.remRequests, "remediation"))

	fmt.Printf("fleetscale: %d nodes, rotation of %d nodes in %d waves\n", r.nodes, r.rotated, len(r.waves))
	fmt.Printf("  duration %v, %.0f nodes/min; waves: mean %v, max %v (%v)\n", r.rotWindow.Round(time.Second),
		float64(r.rotated)/r.rotWindow.Minutes(), r.meanWave().Round(time.Millisecond),
		slices.Max(append([]time.Duration{0}, r.waves...)).Round(time.Millisecond), roundAll(r.waves))
	fmt.Printf("  out of service: most %d, allowed %d; %d samples, %d over\n", r.most, r.allowed, r.samples, r.over)
	fmt.Printf("  upgrade CPU %.2fs (%.1f ms per rotated node), RSS %.1f MiB, live heap %.1f MiB; nats-server CPU %.2fs (%.1f ms per node); progress value %d KiB\n",
		r.upCPU.Seconds(), ms64(r.upCPUPerNode()), mib(r.upRSS), mib(r.upHeap), r.upNATS.Seconds(),
		ms64(r.upNATS/time.Duration(max(1, r.rotated))), r.progressSize>>10)
	fmt.Printf("  held plan: upgrade %.1f ms CPU a tick; member API server %+.1f%% of a core over its rest (%.1f ms a tick)\n",
		ms64(r.heldUpgrade), 100*r.heldAPI, r.heldAPI*float64(fleetTick.Milliseconds()))
	fmt.Printf("  upgrade's member API requests: %s\n", requestsOf(r.upRequests, "upgrade"))
}

func roundAll(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, d.Round(100*time.Millisecond).String())
	}
	return strings.Join(parts, " ")
}

func printFleetSummary(b *testing.B, rs []fleetResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Printf("\nfleetscale: remediation (%d%% broken at once)\n", fleetFailingPct)
	fmt.Printf("  %-7s %7s %10s %10s %10s %12s %12s %9s %9s\n", "nodes", "broken", "P50 repl", "P99 repl", "max repl", "CPU ms/dec", "above rest", "rest %", "RSS MiB")
	for _, r := range rs {
		ds := r.remLatency[rem.EvReplaced]
		fmt.Printf("  %-7d %7d %10v %10v %10v %12.1f %12.1f %9.1f %9.1f\n", r.nodes, r.failing,
			percentile(ds, .5).Round(time.Millisecond), percentile(ds, .99).Round(time.Millisecond), percentile(ds, 1).Round(time.Millisecond),
			ms64(r.remCPUPerDecision()), ms64(r.remAboveRest()), 100*r.remAtRest, mib(r.remRSS))
	}
	fmt.Printf("\nfleetscale: rotation (waves of %s unavailable + %s surge, soak 1s, tick %v)\n", fleetWave.MaxUnavailable, fleetWave.MaxSurge, fleetTick)
	fmt.Printf("  %-7s %9s %9s %6s %10s %14s %8s %12s %13s %9s %9s %8s %13s\n", "nodes", "duration", "nodes/min", "waves", "mean wave",
		"max out/allow", "samples", "CPU ms/node", "NATS ms/node", "held ms/t", "API ms/t", "RSS MiB", "progress KiB")
	for _, r := range rs {
		fmt.Printf("  %-7d %9v %9.0f %6d %10v %14s %8d %12.1f %13.1f %9.1f %9.1f %8.1f %13d\n", r.nodes, r.rotWindow.Round(time.Second),
			float64(r.rotated)/r.rotWindow.Minutes(), len(r.waves), r.meanWave().Round(100*time.Millisecond), fmt.Sprintf("%d/%d", r.most, r.allowed),
			r.samples, ms64(r.upCPUPerNode()), ms64(r.upNATS/time.Duration(max(1, r.rotated))), ms64(r.heldUpgrade),
			r.heldAPI*float64(fleetTick.Milliseconds()), mib(r.upRSS), r.progressSize>>10)
	}
	fmt.Printf("  (held ms/t: the upgrade process's CPU a tick with the plan held; API ms/t: the member API server's above its rest)\n")
	first, last := rs[0], rs[len(rs)-1]
	if len(rs) < 2 || last.nodes <= first.nodes {
		return
	}
	x := float64(last.nodes) / float64(first.nodes)
	perNode := func(rss uint64, n int) float64 { return float64(rss) / float64(n) }
	fmt.Printf("\nfleetscale: %d vs %d nodes (%.0fx the fleet; flat is 1.00x)\n", last.nodes, first.nodes, x)
	fmt.Printf("  remediation CPU per decision           %6.2fx\n", ratio(last.remCPUPerDecision(), first.remCPUPerDecision()))
	if last.remAboveRest() > 0 && first.remAboveRest() > 0 {
		fmt.Printf("  remediation CPU per decision over rest %6.2fx\n", ratio(last.remAboveRest(), first.remAboveRest()))
	} else {
		fmt.Printf("  remediation CPU per decision over rest    n/a (within the rest rate's noise)\n")
	}
	fmt.Printf("  remediation CPU at rest                %6.2fx\n", last.remAtRest/first.remAtRest)
	fmt.Printf("  remediation P99 break -> replaced      %6.2fx\n", ratio(percentile(last.remLatency[rem.EvReplaced], .99), percentile(first.remLatency[rem.EvReplaced], .99)))
	fmt.Printf("  remediation RSS per node               %6.2fx (marginal %.1f KiB a node)\n", perNode(last.remRSS, last.nodes)/perNode(first.remRSS, first.nodes),
		float64(int64(last.remRSS)-int64(first.remRSS))/float64(last.nodes-first.nodes)/1024)
	fmt.Printf("  upgrade CPU per rotated node           %6.2fx\n", ratio(last.upCPUPerNode(), first.upCPUPerNode()))
	fmt.Printf("  nats-server CPU per rotated node       %6.2fx\n", ratio(last.upNATS/time.Duration(max(1, last.rotated)), first.upNATS/time.Duration(max(1, first.rotated))))
	fmt.Printf("  upgrade CPU per tick, plan held        %6.2fx\n", ratio(last.heldUpgrade, first.heldUpgrade))
	fmt.Printf("  rotation time per node                 %6.2fx\n", ratio(last.rotWindow/time.Duration(max(1, last.rotated)), first.rotWindow/time.Duration(max(1, first.rotated))))
	fmt.Printf("  upgrade RSS per node                   %6.2fx (marginal %.1f KiB a node)\n", perNode(last.upRSS, last.nodes)/perNode(first.upRSS, first.nodes),
		float64(int64(last.upRSS)-int64(first.upRSS))/float64(last.nodes-first.nodes)/1024)
	b.ReportMetric(ratio(last.remCPUPerDecision(), first.remCPUPerDecision()), "rem-cpu-per-decision-x")
	b.ReportMetric(ratio(last.upCPUPerNode(), first.upCPUPerNode()), "upgrade-cpu-per-node-x")
}
