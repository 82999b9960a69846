package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
	"atoll.dev/services/propagator"
)

// benchSidecar is the managed sidecar the benchmark moves.
const benchSidecar = "atoll-log-shipper"

// BenchmarkInPlaceSidecars moves the managed log sidecar of
// ATOLL_BENCH_SIDECAR_PODS pods (default 1,000: ATOLL_BENCH_SIDECAR_APPS
// Apps, default 20, over zones a, b, c) from version 1 to version 2, an
// image-only change: admission's sidecar rollout moves the Apps (its
// maxUnavailable ATOLL_BENCH_SIDECAR_MAX_UNAVAILABLE, default every App at
// once, bake 1 s) and the propagator patches their live pods in place.
// Then, in the same run on the same pods, version 3 changes the sidecar's
// image and its resources, which cannot be in place: the same rollout
// replaces the pods (the baseline). Each move is timed from the version's
// write to every pod running the new sidecar image, ready, with no other
// pod left, and the member clusters' API-server writes are counted over
// it (clusterWrites). It prints both, the writes per pod, their ratios,
// the pods that kept their UID, and a timeline of the in-place move.
//
// ATOLL_BENCH_RETRY_MAX, a duration, caps the propagator's retry delay
// (propagator.EnvRetryMax): the in-place step retries its key until every
// pod of a shard is patched, and that retry backs off exponentially up to
// bus.RetryMax (30 s) by default.
//
//	make bench BENCH=InPlaceSidecars
func BenchmarkInPlaceSidecars(b *testing.B) {
	if testing.Short() {
		b.Skip("needs member clusters")
	}
	pods := envInt("ATOLL_BENCH_SIDECAR_PODS", 1000)
	nApps := min(envInt("ATOLL_BENCH_SIDECAR_APPS", 20), pods)
	maxUnavailable := envInt("ATOLL_BENCH_SIDECAR_MAX_UNAVAILABLE", nApps)
	if v := os.Getenv("ATOLL_BENCH_RETRY_MAX"); v != "" {
		b.Setenv(propagator.EnvRetryMax, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	log := benchLogger()
	// Nodes for all the pods plus a surge in any zone; every zone with
	// the in-place image stage (testdata/stages.yaml).
	nodesPerZone := pods/110 + 3
	reg, err := region.Start(ctx, region.Options{Dir: b.TempDir(), Nodes: nodesPerZone, Logger: log,
		ClusterNice: clusterNice, ClusterBackgroundNice: backgroundNice, ZoneConfigs: e2e.EveryZone("stages.yaml")})
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Stop(context.Background())
	cl, gw := regionClient(b, reg)
	defer gw.Close()
	lim := api.Limit{MilliCPU: new(int64(1 << 40)), MemoryBytes: new(int64(1 << 60)), Pods: new(int64(1 << 30))}
	if err := cl.SetQuota(ctx, project, api.TierOnDemand, lim); err != nil {
		b.Fatal(err)
	}
	waitNodesReady(ctx, b, reg, nodesPerZone)
	kv, err := gw.KV(ctx, bus.BucketSidecars)
	if err != nil {
		b.Fatal(err)
	}
	// setVersion stores version n as the gateway's PUT /v1/admin/sidecars
	// does, over the gateway's own NATS user.
	setVersion := func(n int64, image, memory string) {
		v := api.SidecarVersion{Version: n, Created: time.Now().UTC(), CreatedBy: "bench", SidecarSpec: api.SidecarSpec{
			Sidecars: []api.ManagedSidecar{{Container: api.Container{Name: benchSidecar, Image: image,
				Resources: api.Resources{Requests: api.ResourceList{CPU: "1m", Memory: memory}}}}},
			Rollout: api.SidecarRollout{MaxUnavailable: maxUnavailable, BakeSeconds: 1}}}
		doc, err := json.Marshal(v)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := kv.Create(ctx, api.SidecarVersionKey(n), doc); err != nil {
			b.Fatal(err)
		}
		if _, err := kv.Put(ctx, api.SidecarCurrentKey, doc); err != nil {
			b.Fatal(err)
		}
	}
	appDoc := func(name string, replicas int) []byte {
		return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"rollout":{"bakeSeconds":0,"deadlineSeconds":1800},
"template":{"containers":[{"name":"app","image":"app:1","resources":{"requests":{"cpu":"1m","memory":"1Mi"}}}]}}}`,
			project, name, replicas)
	}

	setVersion(1, "log:1", "1Mi")
	// Admission mirrors the current version: wait until it injects it
	// (into a probe, deleted before the Apps).
	for {
		w, err := cl.Apply(ctx, appDoc("probe", 1))
		if err == nil && w.Metadata.SidecarVersion == 1 {
			break
		}
		select {
		case <-ctx.Done():
			b.Fatal("admission never injected version 1")
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := cl.Delete(ctx, project, api.KindApp, "probe"); err != nil {
		b.Fatal(err)
	}
	for i := range nApps {
		replicas := pods / nApps
		if i < pods%nApps {
			replicas++
		}
		if _, err := cl.Submit(ctx, appDoc(fmt.Sprintf("app-%d", i), replicas)); err != nil {
			b.Fatal(err)
		}
	}
	stores := podStores(ctx, reg)
	if err := waitSidecarMoved(ctx, stores, "log:1", pods, nil); err != nil {
		b.Fatal(err)
	}
	b.Logf("pods per zone: %s", podsPerZone(reg, stores))

	move := func(n int64, image, memory string, timeline func(string)) (time.Duration, writes, map[string]bool) {
		before := uids(stores)
		w0, err := clusterWrites(ctx, reg)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		setVersion(n, image, memory)
		if err := waitSidecarMoved(ctx, stores, image, pods, timeline); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		w1, err := clusterWrites(ctx, reg)
		if err != nil {
			b.Fatal(err)
		}
		return took, w1.since(w0), before
	}
	start := time.Now()
	var lines []string
	timeline := func(s string) { lines = append(lines, fmt.Sprintf("  %6.1fs %s", time.Since(start).Seconds(), s)) }
	progress := func(s string) {
		var p api.SidecarProgress
		if e, err := kv.Get(ctx, api.SidecarProgressKey); err == nil && json.Unmarshal(e.Value(), &p) == nil {
			s += fmt.Sprintf("; rollout v%d %s, %d Apps done, %d moving", p.Version, p.Phase, p.Done, len(p.Moving))
		}
		timeline(s)
	}
	b.ResetTimer()
	inTook, inW, inBefore := move(2, "log:2", "1Mi", progress)
	kept := keptUIDs(inBefore, uids(stores))
	reTook, reW, reBefore := move(3, "log:3", "2Mi", nil)
	reKept := keptUIDs(reBefore, uids(stores))
	b.StopTimer()

	b.Logf("in-place move, every 5 s (pods on log:2, ready):\n%s", strings.Join(lines, "\n"))
	b.Logf("%d pods (%d Apps) over zones a, b, c, the managed sidecar v1 -> v2 (image only) -> v3 (image and resources), rollout maxUnavailable %d Apps, bake 1 s:",
		pods, nApps, maxUnavailable)
	b.Logf("  in place:  %v, %d member API-server writes, %.2f per pod, %d of %d pods kept their UID (%s)",
		inTook.Round(time.Millisecond), inW.total(), float64(inW.total())/float64(pods), kept, pods, inW)
	b.Logf("  replaced:  %v, %d member API-server writes, %.2f per pod, %d of %d pods kept their UID (%s)",
		reTook.Round(time.Millisecond), reW.total(), float64(reW.total())/float64(pods), reKept, pods, reW)
	b.Logf("  replaced / in place: time %.2fx, writes %.2fx", ratio(reTook, inTook), float64(reW.total())/float64(max(inW.total(), 1)))
	b.ReportMetric(inTook.Seconds(), "inplace-s")
	b.ReportMetric(reTook.Seconds(), "replace-s")
	b.ReportMetric(float64(inW.total()), "inplace-writes")
	b.ReportMetric(float64(reW.total()), "replace-writes")
	b.ReportMetric(float64(inW.total())/float64(pods), "inplace-writes/pod")
	b.ReportMetric(float64(reW.total())/float64(pods), "replace-writes/pod")
}

// waitNodesReady waits until every member cluster is healthy with n
// ready nodes, so the Apps spread over the zones.
func waitNodesReady(ctx context.Context, b *testing.B, reg *region.Region, n int) {
	b.Helper()
	cl, gw := regionClient(b, reg)
	defer gw.Close()
	for {
		infos, err := cl.Clusters(ctx)
		if err != nil {
			b.Fatal(err)
		}
		ready := 0
		for _, c := range infos {
			nodes := 0
			for _, p := range c.Pools {
				nodes += p.ReadyNodes
			}
			if c.Healthy && nodes >= n {
				ready++
			}
		}
		if ready == len(reg.Env.Clusters) {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatal("the clusters' inventory never showed every node ready")
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// podsPerZone says how many pods each member cluster's store holds.
func podsPerZone(reg *region.Region, stores []cache.Store) string {
	var parts []string
	for i, c := range reg.Env.Clusters {
		parts = append(parts, fmt.Sprintf("%s %d", c.Name, len(stores[i].List())))
	}
	return strings.Join(parts, ", ")
}

// uids returns the set of the stores' pods' UIDs.
func uids(stores []cache.Store) map[string]bool {
	out := map[string]bool{}
	for _, st := range stores {
		for _, o := range st.List() {
			if p, ok := o.(*corev1.Pod); ok {
				out[string(p.UID)] = true
			}
		}
	}
	return out
}

// keptUIDs counts the UIDs of after that were in before.
func keptUIDs(before, after map[string]bool) int {
	n := 0
	for u := range after {
		if before[u] {
			n++
		}
	}
	return n
}

// waitSidecarMoved waits until the pods in stores are n ready pods whose
// managed sidecar runs image (as their status says), with no other pod
// left. timeline, when set, is told the count every 5 s.
func waitSidecarMoved(ctx context.Context, stores []cache.Store, image string, n int, timeline func(string)) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		moved, others := 0, 0
		for _, st := range stores {
			for _, o := range st.List() {
				if p, ok := o.(*corev1.Pod); ok && runsSidecar(p, image) {
					moved++
				} else {
					others++
				}
			}
		}
		if timeline != nil && (time.Since(last) >= 5*time.Second || moved == n && others == 0) {
			timeline(fmt.Sprintf("%d of %d pods moved, %d others", moved, n, others))
			last = time.Now()
		}
		if moved == n && others == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d pods on %s, %d others: %w", moved, n, image, others, ctx.Err())
		case <-tick.C:
		}
	}
}

// runsSidecar reports whether p is Running and ready, not terminating,
// with its managed sidecar on image.
func runsSidecar(p *corev1.Pod, image string) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	ready := false
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == benchSidecar {
			return ready && s.Image == image
		}
	}
	return false
}
