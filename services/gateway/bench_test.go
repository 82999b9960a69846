package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway"
)

// The read benchmark's shape: a region of benchProjects projects of
// benchPerProject Apps each, read by benchClients concurrent clients.
const (
	benchProjects   = 10
	benchPerProject = 1000
	benchClients    = 8
	benchGets       = 20000 // single-workload reads per path
	benchPages      = 2000  // list pages per path
	benchPageSize   = 100
)

// benchApp returns App i of project as admission stores it (defaults
// applied, the platform's log shipper injected as a native sidecar,
// generation, uid and times set) and its status as the aggregator writes
// it for three shards in three zones.
func benchApp(project string, i int) (*api.Workload, *api.Status) {
	name := fmt.Sprintf("svc-%04d", i)
	replicas := int32(3 + i%4)
	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Minute)
	env := []string{"prod", "staging"}[i%2]
	w := &api.Workload{
		APIVersion: api.APIVersion,
		Kind:       api.KindApp,
		Metadata: api.Metadata{
			Project: project, Name: name,
			Labels:     map[string]string{"app": name, "team": fmt.Sprintf("team-%d", i%5), "env": env},
			Generation: int64(1 + i%3), UID: fmt.Sprintf("3f1c9a2e-%04d-4b7d-9c1e-%012d", i, i),
			Created: created, Updated: created.Add(time.Hour),
		},
		Spec: &api.AppSpec{
			Common: api.Common{
				Tier:      api.TierOnDemand,
				Placement: &api.Placement{Zones: []string{"a", "b", "c"}},
				Template: api.PodTemplate{
					Containers: []api.Container{{
						Name:  "web",
						Image: fmt.Sprintf("registry.example.com/%s/%s:1.%d.0", project, name, i%7),
						Args:  []string{"--port=8080", "--log-format=json"},
						Env: []api.EnvVar{
							{Name: "ENV", Value: env},
							{Name: "OTEL_SERVICE_NAME", Value: name},
						},
						Ports: []api.Port{{Name: "http", ContainerPort: 8080, Protocol: "TCP"}},
						Resources: api.Resources{
							Requests: api.ResourceList{CPU: "250m", Memory: "256Mi"},
							Limits:   api.ResourceList{CPU: "1", Memory: "512Mi"},
						},
						VolumeMounts: []api.VolumeMount{{Name: "scratch", MountPath: "/tmp"}},
					}},
					Sidecars: []api.Container{{
						Name:  "atoll-log-shipper",
						Image: "registry.atoll.dev/log-shipper:1.0",
						Resources: api.Resources{
							Requests: api.ResourceList{CPU: "10m", Memory: "16Mi"},
							Limits:   api.ResourceList{CPU: "100m", Memory: "64Mi"},
						},
					}},
					Volumes:        []api.Volume{{Name: "scratch", EmptyDir: true}},
					ServiceAccount: "default",
				},
			},
			Replicas: &replicas,
		},
	}
	phase, ready := api.PhaseRunning, replicas
	switch {
	case i%10 == 3:
		phase, ready = api.PhaseDegraded, replicas-1
	case i%25 == 7:
		phase, ready = api.PhaseProgressing, replicas-2
	}
	at := created.Add(2 * time.Hour)
	st := &api.Status{
		Key: w.Key(), Generation: w.Metadata.Generation, Phase: phase,
		Desired: replicas, Ready: ready, Running: replicas,
		Zones:    map[string]api.ZoneStatus{},
		Clusters: map[string]api.ZoneStatus{},
		Conditions: []api.Condition{
			{Type: "Scheduled", Status: true, Reason: "Placed", Message: "3 shards in zones a, b, c"},
			{Type: "Available", Status: phase == api.PhaseRunning, Reason: "MinimumReplicasAvailable"},
		},
		Images:  []string{w.Spec.PodTemplate().Containers[0].Image, "registry.atoll.dev/log-shipper:1.0"},
		Updated: at,
	}
	for z, zone := range []string{"a", "b", "c"} {
		n := replicas / 3
		if int32(z) < replicas%3 {
			n++
		}
		r := min(n, max(0, ready-int32(z)*(replicas/3)))
		cs := api.ZoneStatus{Desired: n, Ready: r, Running: n}
		st.Zones[zone] = cs
		cluster := "zone-" + zone + "-1"
		st.Clusters[cluster] = cs
		st.Events = append(st.Events, api.Event{
			Cluster: cluster, Object: "Deployment/" + name, Type: "Normal", Reason: "ScalingReplicaSet",
			Message: fmt.Sprintf("Scaled up replica set %s-7d9f8c6b5 to %d", name, n), Time: at.Add(-time.Duration(z) * time.Minute),
		})
	}
	return w, st
}

// populate writes benchProjects x benchPerProject Apps and their statuses
// straight into the buckets, statuses first, with bounded concurrency, and
// returns every key.
func populate(ctx context.Context, tb testing.TB, b *bus.Bus) []string {
	tb.Helper()
	workloads, err := b.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		tb.Fatal(err)
	}
	status, err := b.KV(ctx, bus.BucketStatus)
	if err != nil {
		tb.Fatal(err)
	}
	type job struct {
		project string
		i       int
	}
	jobs := make(chan job)
	keys := make([]string, 0, benchProjects*benchPerProject)
	for p := range benchProjects {
		for i := range benchPerProject {
			keys = append(keys, api.Key(benchProject(p), api.KindApp, fmt.Sprintf("svc-%04d", i)))
		}
	}
	var (
		wg    sync.WaitGroup
		first atomic.Pointer[error]
	)
	for range 32 {
		wg.Go(func() {
			for j := range jobs {
				w, st := benchApp(j.project, j.i)
				wb, err1 := json.Marshal(w)
				sb, err2 := json.Marshal(st)
				if err1 != nil || err2 != nil {
					e := fmt.Errorf("marshal %s: %w", w.Key(), errors.Join(err1, err2))
					first.CompareAndSwap(nil, &e)
					continue
				}
				if _, err := status.Put(ctx, w.Key(), sb); err != nil {
					first.CompareAndSwap(nil, &err)
					continue
				}
				if _, err := workloads.Put(ctx, w.Key(), wb); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for p := range benchProjects {
		for i := range benchPerProject {
			jobs <- job{benchProject(p), i}
		}
	}
	close(jobs)
	wg.Wait()
	if e := first.Load(); e != nil {
		tb.Fatalf("populate: %v", *e)
	}
	return keys
}

func benchProject(p int) string { return fmt.Sprintf("proj-%02d", p) }

// latencies is one path's measurement.
type latencies struct {
	name    string
	samples []time.Duration
	wall    time.Duration
}

func (l latencies) pct(p float64) time.Duration {
	if len(l.samples) == 0 {
		return 0
	}
	return l.samples[min(len(l.samples)-1, int(float64(len(l.samples))*p))]
}

func (l latencies) rps() float64 { return float64(len(l.samples)) / l.wall.Seconds() }

// measure runs op(from) ... op(to-1) on benchClients goroutines and adds
// the latency of each, and the wall time, to l; it stops at the first error.
func (l *latencies) measure(from, to int, op func(i int) error) error {
	var (
		next    atomic.Int64
		mu      sync.Mutex
		wg      sync.WaitGroup
		failure atomic.Pointer[error]
	)
	next.Store(int64(from))
	start := time.Now()
	for range benchClients {
		wg.Go(func() {
			local := make([]time.Duration, 0, (to-from)/benchClients+1)
			for {
				i := int(next.Add(1)) - 1
				if i >= to || failure.Load() != nil {
					break
				}
				t0 := time.Now()
				if err := op(i); err != nil {
					failure.CompareAndSwap(nil, &err)
					break
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			l.samples = append(l.samples, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	l.wall += time.Since(start)
	if e := failure.Load(); e != nil {
		return fmt.Errorf("%s: %w", l.name, *e)
	}
	return nil
}

// listQuery is one page request of a list walk.
type listQuery struct {
	project, filter string
	// keys of the page, recorded on the first walk for the direct baseline.
	keys []string
}

// BenchmarkGatewayReads measures reads through the gateway (HTTP on
// loopback, served from its watch-fed cache) against direct Key-Value
// reads of the same keys at the same concurrency, in one run over 10,000
// Apps. Run it with -benchtime 1x: one iteration is the whole measured run.
//
// Baselines: a get is compared with one kv.Get of the workload key (and,
// for information, with kv.Get of the workload and of its status, which
// is what the gateway's answer holds); a list page with 100 sequential
// kv.Get of the keys that page returned, known in advance, so the
// baseline lists no keys, filters nothing and reads no status. The
// gateway's /healthz over the same HTTP client is shown as the floor that
// HTTP on loopback sets.
func BenchmarkGatewayReads(b *testing.B) {
	g := newTestGateway(b, gateway.Config{RatePerSecond: 1e9, Burst: 1 << 30})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t0 := time.Now()
	keys := populate(ctx, b, g.Bus)
	wrote := time.Since(t0)
	require.EventuallyWithT(b, func(c *assert.CollectT) {
		if !assert.GreaterOrEqual(c, g.GW.Cache().Len(), len(keys), "workloads cached") {
			return
		}
		for _, k := range keys {
			if it, ok, _ := g.GW.Cache().Get(ctx, k); !ok || it.Phase == api.PhasePending { // every populated status has a phase
				c.Errorf("%s not cached with its status", k)
				return
			}
		}
	}, 60*time.Second, 20*time.Millisecond)
	b.Logf("populated %d workloads and statuses in %v; cache complete after %v", len(keys), wrote.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	workloads, err := g.Bus.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		b.Fatal(err)
	}
	status, err := g.Bus.KV(ctx, bus.BucketStatus)
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: 2 * benchClients, MaxIdleConnsPerHost: 2 * benchClients,
		DisableCompression: true, IdleConnTimeout: time.Minute,
	}}
	defer client.CloseIdleConnections()
	get := func(path string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+g.Admin)
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return body, nil
	}

	// The same random keys for both get paths.
	rng := rand.New(rand.NewPCG(1, 2))
	getKeys := make([]string, benchGets)
	for i := range getKeys {
		getKeys[i] = keys[rng.IntN(len(keys))]
	}
	var getBytes, listBytes atomic.Int64
	gwGet := func(i int) error {
		project, _, name, _ := api.ParseKey(getKeys[i])
		body, err := get("/v1/projects/" + project + "/workloads/app/" + name)
		if err != nil {
			return err
		}
		getBytes.Add(int64(len(body)))
		if !bytes.Contains(body, []byte(`"name":"`+name+`"`)) {
			return fmt.Errorf("GET %s: another workload: %.200s", getKeys[i], body)
		}
		return nil
	}
	// The HTTP floor: the same client and server answering /healthz
	// (middleware and routing, no authentication, no body).
	healthz := func(int) error {
		_, err := get("/healthz")
		return err
	}
	kvGet := func(i int) error {
		e, err := workloads.Get(ctx, getKeys[i])
		if err != nil {
			return fmt.Errorf("kv get %s: %w", getKeys[i], err)
		}
		if len(e.Value()) == 0 {
			return fmt.Errorf("kv get %s: empty", getKeys[i])
		}
		return nil
	}
	kvGetBoth := func(i int) error {
		if err := kvGet(i); err != nil {
			return err
		}
		if _, err := status.Get(ctx, getKeys[i]); err != nil {
			return fmt.Errorf("kv get status %s: %w", getKeys[i], err)
		}
		return nil
	}

	// List walks: each client takes a (project, filter) and follows the
	// continue tokens to the last page. The pages are recorded once, so
	// that both list paths read the same pages.
	filters := []string{"kind=App", "label=team%3Dteam-3", "phase=Running", "phase=Degraded", "label=env%3Dprod&phase=Running"}
	var pages []listQuery
	for len(pages) < benchPages {
		for p := 0; p < benchProjects && len(pages) < benchPages; p++ {
			for _, f := range append([]string{""}, filters...) {
				project, token := benchProject(p), ""
				for {
					q := "limit=" + fmt.Sprint(benchPageSize)
					if f != "" {
						q += "&" + f
					}
					if token != "" {
						q += "&continue=" + url.QueryEscape(token)
					}
					body, err := get("/v1/projects/" + project + "/workloads?" + q)
					if err != nil {
						b.Fatal(err)
					}
					var page computeapi.WorkloadList
					if err := json.Unmarshal(body, &page); err != nil {
						b.Fatalf("list %s?%s: %v", project, q, err)
					}
					lq := listQuery{project: project, filter: q}
					for _, it := range page.Items {
						if it.Metadata.Project != project {
							b.Fatalf("list %s?%s: item of project %s", project, q, it.Metadata.Project)
						}
						lq.keys = append(lq.keys, api.Key(project, it.Kind, it.Metadata.Name))
					}
					if len(lq.keys) == 0 || len(lq.keys) > benchPageSize || (page.Continue != "" && len(lq.keys) != benchPageSize) {
						b.Fatalf("list %s?%s: %d items, continue %q", project, q, len(lq.keys), page.Continue)
					}
					pages = append(pages, lq)
					if token = page.Continue; token == "" {
						break
					}
				}
			}
		}
	}
	pages = pages[:benchPages]
	gwList := func(i int) error {
		body, err := get("/v1/projects/" + pages[i].project + "/workloads?" + pages[i].filter)
		if err != nil {
			return err
		}
		listBytes.Add(int64(len(body)))
		if n := bytes.Count(body, []byte(`"apiVersion":`)); n != len(pages[i].keys) {
			return fmt.Errorf("list %s?%s: %d items, want %d", pages[i].project, pages[i].filter, n, len(pages[i].keys))
		}
		return nil
	}
	kvList := func(i int) error {
		for _, k := range pages[i].keys {
			if _, err := workloads.Get(ctx, k); err != nil {
				return fmt.Errorf("kv get %s: %w", k, err)
			}
		}
		return nil
	}

	// Warm both paths (connections, consumers, caches) before measuring.
	for i := range 200 {
		if err := gwGet(i); err != nil {
			b.Fatal(err)
		}
		if err := kvGetBoth(i); err != nil {
			b.Fatal(err)
		}
	}

	getBytes.Store(0)
	// The paths take turns, a quarter of each path's requests at a time, so
	// that a change in the machine's load falls on all of them alike.
	paths := []struct {
		name string
		n    int
		op   func(int) error
	}{
		{"gateway get", benchGets, gwGet},
		{"gateway /healthz (floor)", benchGets, healthz},
		{"kv get (workload)", benchGets, kvGet},
		{"kv get (workload+status)", benchGets, kvGetBoth},
		{"gateway list page", benchPages, gwList},
		{"kv 100 gets (page)", benchPages, kvList},
	}
	const rounds = 4
	results := make([]latencies, len(paths))
	b.ResetTimer()
	for range b.N {
		for i, p := range paths {
			results[i] = latencies{name: p.name}
		}
		for r := range rounds {
			for i, p := range paths {
				if err := results[i].measure(r*p.n/rounds, (r+1)*p.n/rounds, p.op); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.StopTimer()
	for i := range results {
		slices.Sort(results[i].samples)
	}

	gwG, kvG, kvGB, gwL, kvL := results[0], results[2], results[3], results[4], results[5]
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nBenchmarkGatewayReads: %d workloads in %d projects, %d clients over loopback HTTP keep-alive; direct reads with jetstream kv.Get on the same bus\n",
		len(keys), benchProjects, benchClients)
	fmt.Fprintf(&sb, "mean answer: get %.1f KiB, list page %.1f KiB (items of %d, filters: none | %s)\n",
		float64(getBytes.Load())/float64(len(gwG.samples))/1024, float64(listBytes.Load())/float64(len(gwL.samples))/1024,
		benchPageSize, strings.ReplaceAll(strings.Join(filters, " | "), "%3D", "="))
	fmt.Fprintf(&sb, "%-28s %8s %10s %10s %10s\n", "path", "requests", "p50", "p99", "req/s")
	for _, l := range results {
		fmt.Fprintf(&sb, "%-28s %8d %10v %10v %10.0f\n", l.name, len(l.samples), l.pct(0.50).Round(time.Microsecond), l.pct(0.99).Round(time.Microsecond), l.rps())
	}
	ratio := func(a, d latencies) string {
		return fmt.Sprintf("p50 %.2fx  p99 %.2fx  req/s %.2fx",
			float64(a.pct(0.5))/float64(d.pct(0.5)), float64(a.pct(0.99))/float64(d.pct(0.99)), a.rps()/d.rps())
	}
	fmt.Fprintf(&sb, "gateway get / kv get (workload):        %s\n", ratio(gwG, kvG))
	fmt.Fprintf(&sb, "gateway get / kv get (workload+status): %s\n", ratio(gwG, kvGB))
	fmt.Fprintf(&sb, "gateway list page / kv 100 gets:        %s\n", ratio(gwL, kvL))
	// The table goes to stdout: the testing package cuts long benchmark logs.
	fmt.Print(sb.String())

	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(gwG.pct(0.5)), "get-p50-µs")
	b.ReportMetric(us(gwG.pct(0.99)), "get-p99-µs")
	b.ReportMetric(gwG.rps(), "get-req/s")
	b.ReportMetric(us(kvG.pct(0.5)), "kvget-p50-µs")
	b.ReportMetric(us(kvG.pct(0.99)), "kvget-p99-µs")
	b.ReportMetric(kvG.rps(), "kvget-req/s")
	b.ReportMetric(us(gwL.pct(0.5)), "list-p50-µs")
	b.ReportMetric(us(gwL.pct(0.99)), "list-p99-µs")
	b.ReportMetric(gwL.rps(), "list-req/s")
	b.ReportMetric(us(kvL.pct(0.5)), "kvlist-p50-µs")
	b.ReportMetric(us(kvL.pct(0.99)), "kvlist-p99-µs")
	b.ReportMetric(kvL.rps(), "kvlist-req/s")
	b.ReportMetric(gwG.rps()/kvG.rps(), "get-rps-ratio")
	b.ReportMetric(gwL.rps()/kvL.rps(), "list-rps-ratio")
}
