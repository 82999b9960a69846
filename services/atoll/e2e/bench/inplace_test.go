package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"atoll.dev/libs/api"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// BenchmarkInPlaceUpdate moves one container image of an App's pods
// (ATOLL_BENCH_INPLACE_PODS, default 1,000, over zones a, b, c) in place
// (updateStrategy InPlaceIfPossible), then, in the same run on the same
// clusters, moves them to another image by replacing them (RollingUpdate,
// the baseline). Each move is timed from the update to every pod running
// the new image with none left over, and the member clusters' API servers'
// writes (apiserver_request_total: POST, PUT, PATCH, APPLY, DELETE, not
// dry runs) are counted over it. It prints both, their ratios, and the
// writes per resource.
//
//	make bench BENCH=InPlaceUpdate
func BenchmarkInPlaceUpdate(b *testing.B) {
	if testing.Short() {
		b.Skip("needs member clusters")
	}
	pods := envInt("ATOLL_BENCH_INPLACE_PODS", 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	log := benchLogger()
	// Every zone with KWOK's defaults plus the in-place image update
	// stage (testdata/stages.yaml); nodes for all the pods and a surge in
	// any one zone (a zone whose API server is slow to answer the health
	// probes may be left out of the placement).
	perNode := 110
	nodesPerZone := pods/perNode + 3
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

	// Every cluster healthy with all its nodes ready, so the App spreads
	// over the three zones.
	waitNodesReady(ctx, b, reg, nodesPerZone)
	stores := podStores(ctx, reg)

	const name = "movers"
	doc := func(strategy, image string) []byte {
		return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"updateStrategy":%q,"rollout":{"bakeSeconds":0,"deadlineSeconds":1800},
"template":{"containers":[
 {"name":"app","image":%q,"resources":{"requests":{"cpu":"1m","memory":"1Mi"}}},
 {"name":"helper","image":"helper:1","resources":{"requests":{"cpu":"1m","memory":"1Mi"}}}]}}}`,
			project, name, pods, strategy, image)
	}
	if _, err := cl.Submit(ctx, doc(api.UpdateInPlaceIfPossible, "app:1")); err != nil {
		b.Fatal(err)
	}
	if err := waitMoved(ctx, stores, "app:1", pods); err != nil {
		b.Fatal(err)
	}
	if p, err := cl.Placement(ctx, api.Key(project, api.KindApp, name)); err == nil && p != nil {
		var shards []string
		for _, sh := range p.Shards {
			shards = append(shards, fmt.Sprintf("%s %d", sh.Zone, sh.Replicas))
		}
		b.Logf("pods per zone: %s", strings.Join(shards, ", "))
	}

	move := func(strategy, image string) (time.Duration, writes) {
		w0, err := clusterWrites(ctx, reg)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := cl.Update(ctx, doc(strategy, image)); err != nil {
			b.Fatal(err)
		}
		if err := waitMoved(ctx, stores, image, pods); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		w1, err := clusterWrites(ctx, reg)
		if err != nil {
			b.Fatal(err)
		}
		return took, w1.since(w0)
	}
	b.ResetTimer()
	inTook, inW := move(api.UpdateInPlaceIfPossible, "app:2")
	reTook, reW := move(api.UpdateRollingUpdate, "app:3")
	b.StopTimer()

	b.Logf("%d pods, one container image each, over zones a, b, c:", pods)
	b.Logf("  in place:  %v, %d member API-server writes (%s)", inTook.Round(time.Millisecond), inW.total(), inW)
	b.Logf("  replaced:  %v, %d member API-server writes (%s)", reTook.Round(time.Millisecond), reW.total(), reW)
	b.Logf("  replaced / in place: time %.2fx, writes %.2fx", ratio(reTook, inTook), float64(reW.total())/float64(max(inW.total(), 1)))
	b.ReportMetric(inTook.Seconds(), "inplace-s")
	b.ReportMetric(reTook.Seconds(), "replace-s")
	b.ReportMetric(float64(inW.total()), "inplace-writes")
	b.ReportMetric(float64(reW.total()), "replace-writes")
}

// podStores returns an informer store of the project's pods in every
// member cluster, synced (a watch: lists of a thousand pods outlast the
// clients' timeout on a loaded machine).
func podStores(ctx context.Context, reg *region.Region) []cache.Store {
	var out []cache.Store
	for _, c := range reg.Env.Clusters {
		f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(api.Namespace(project)))
		inf := f.Core().V1().Pods().Informer()
		f.Start(ctx.Done())
		f.WaitForCacheSync(ctx.Done())
		out = append(out, inf.GetStore())
	}
	return out
}

// waitMoved waits until the pods in stores are n Running pods whose app
// container runs image (as their status says), with no other pod left.
func waitMoved(ctx context.Context, stores []cache.Store, image string, n int) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		moved, others := 0, 0
		for _, st := range stores {
			for _, o := range st.List() {
				if p, ok := o.(*corev1.Pod); ok && runs(p, image) {
					moved++
				} else {
					others++
				}
			}
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

// runs reports whether p is Running, not terminating, with its app
// container on image.
func runs(p *corev1.Pod, image string) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "app" {
			return s.Image == image
		}
	}
	return false
}

// writes counts the member API servers' write requests by resource.
type writes map[string]float64

func (w writes) total() int {
	var n float64
	for _, v := range w {
		n += v
	}
	return int(n)
}

func (w writes) since(earlier writes) writes {
	out := writes{}
	for k, v := range w {
		if d := v - earlier[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// String lists the resources with the most writes first.
func (w writes) String() string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	for k, v := range w {
		all = append(all, kv{k, v})
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if all[j].v > all[i].v || all[j].v == all[i].v && all[j].k < all[i].k {
				all[i], all[j] = all[j], all[i]
			}
		}
	}
	var parts []string
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %d", e.k, int(e.v)))
	}
	return strings.Join(parts, ", ")
}

// writeVerbs are the verbs of apiserver_request_total that write.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// clusterWrites sums every member cluster's apiserver_request_total of
// write verbs (dry runs left out) by resource ("pods", "pods/status",
// "replicasets", ...).
func clusterWrites(ctx context.Context, reg *region.Region) (writes, error) {
	out := writes{}
	for _, c := range reg.Env.Clusters {
		var body []byte
		var err error
		for range 5 { // a loaded API server may outlast the client's timeout
			if body, err = c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx); err == nil {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s metrics: %w", c.Name, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "apiserver_request_total{")
			if !ok {
				continue
			}
			labels, value, ok := strings.Cut(line, "} ")
			if !ok {
				continue
			}
			l := parseLabels(labels)
			if !writeVerbs[l["verb"]] || l["dry_run"] != "" {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				continue
			}
			res := l["resource"]
			if l["subresource"] != "" {
				res += "/" + l["subresource"]
			}
			out[res] += v
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseLabels reads Prometheus text labels (a="x",b="y"); values here
// hold no commas or quotes.
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}
