// Command atoll-chaos is the smoke and fault test of the Compose region
// (`make compose-test`, hack/compose.sh test). It talks to the region only
// as a user does, through the gateways with the SDK, and hurts it only from
// outside, with the docker CLI:
//
//   - smoke: one App of 3 replicas, Running 1/1/1 over zones a, b and c,
//     with its events; its quota footprint is measured for the fault test.
//   - fault: -n Apps (1 replica each) submitted at -rate per second with an
//     idempotency key each, alternating between the gateways and retried
//     on the other when one fails, while every service replica is
//     `docker kill`ed once, one NATS server is killed, and another is
//     disconnected from the bus network for -partition. Then it waits until
//     every accepted App is Running and counts: accepted, converged, lost
//     (accepted but never Running), duplicated (an App with more than one
//     Deployment in a cluster, or more replicas than desired), the quota
//     usage against the sum of the accepted Apps' footprints, and the Apps
//     whose events lack admitted, scheduled, propagated or running.
//     Each App's events are listed once: a list answered 200 is complete
//     (the gateway refuses one it cannot complete), so an App whose list
//     needed a second read fails the test.
//
// It exits 1 when anything is lost, duplicated or unaccounted for, or an
// events list needed a second read.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/pki"
	"atoll.dev/libs/sdk"
)

type options struct {
	servers   []string
	token     string
	project   string
	n         int
	rate      float64
	partition time.Duration
	converge  time.Duration
	compose   string // the compose project: containers are <compose>_<service>_<i>
	services  []string
	skipFault bool
	// quotaSettle is how long the quota ledger may take to equal the sum.
	quotaSettle time.Duration
	// clientOpts configure every gateway client (the CA to trust).
	clientOpts []sdk.Option
	// region is where the faults are injected and the member clusters read.
	region region
}

// region is the deployment the test hurts: Compose (docker) or Kubernetes
// (kubectl, k8s.go).
type region interface {
	// injectFaults spreads its faults over window and says what it did.
	injectFaults(ctx context.Context, log *slog.Logger, o options, window time.Duration) []string
	// deployments lists a namespace's Deployments in a member cluster, per
	// workload label.
	deployments(ctx context.Context, cluster, namespace string) (map[string]deployment, error)
}

func main() {
	var o options
	var servers, services, ca string
	flag.StringVar(&servers, "servers", "https://127.0.0.1:8080,https://127.0.0.1:8081", "the gateways, comma-separated")
	flag.StringVar(&ca, "ca", "", "PEM file of the CA that signed the gateways' certificate (deploy/compose/secrets/tls/ca.crt)")
	flag.StringVar(&o.token, "token", os.Getenv("ATOLL_TOKEN"), "a platform admin's API token (ATOLL_TOKEN)")
	flag.StringVar(&o.project, "project", fmt.Sprintf("chaos-%d", time.Now().Unix()%100000), "the project of the fault test's Apps")
	flag.IntVar(&o.n, "n", 1000, "Apps to submit")
	flag.Float64Var(&o.rate, "rate", 8, "submissions per second")
	flag.DurationVar(&o.partition, "partition", 30*time.Second, "how long a NATS server is disconnected")
	flag.DurationVar(&o.converge, "converge", 10*time.Minute, "how long every accepted App may take to be Running")
	flag.StringVar(&o.compose, "compose-project", "atoll", "the compose project")
	flag.StringVar(&services, "services", os.Getenv("SERVICES"), "the services whose replicas are killed (SERVICES)")
	flag.BoolVar(&o.skipFault, "smoke-only", false, "run the smoke test only")
	var k k8sRegion
	flag.StringVar(&k.kubeconfig, "k8s-kubeconfig", "", "hurt a region deployed on Kubernetes (deploy/k8s) through this kubeconfig instead of Compose's containers (make k8s-test)")
	flag.StringVar(&k.namespace, "k8s-namespace", "atoll-system", "the region's namespace (with -k8s-kubeconfig)")
	flag.StringVar(&k.members, "k8s-members", "", "a directory of zone-<z>.kubeconfig files that read the member clusters from this host (with -k8s-kubeconfig)")
	flag.StringVar(&k.prometheus, "k8s-prometheus", "", "the region's Prometheus (http://host:9090): the canary's rounds and the alerts that fired during the test (with -k8s-kubeconfig)")
	flag.DurationVar(&o.quotaSettle, "quota-settle", 2*time.Minute, "how long the quota ledger may take to equal the sum of the Apps")
	flag.Parse()
	o.servers = strings.Split(servers, ",")
	o.services = strings.Fields(services)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	o.region = composeRegion{project: o.compose}
	if k.kubeconfig != "" {
		k.services = o.services
		o.region = k
	}
	if ca != "" {
		pool, err := pki.LoadPool(ca)
		if err != nil {
			log.Error("compose test failed", "err", err)
			os.Exit(1)
		}
		o.clientOpts = append(o.clientOpts, sdk.WithRootCAs(pool))
	}
	if err := run(context.Background(), log, o); err != nil {
		log.Error("compose test failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, o options) error {
	var clients []*sdk.Client
	for _, s := range o.servers {
		c, err := sdk.New(s, append([]sdk.Option{sdk.WithToken(o.token), sdk.WithTimeout(5 * time.Second), sdk.WithRetry(3, 200*time.Millisecond, time.Second)}, o.clientOpts...)...)
		if err != nil {
			return err
		}
		clients = append(clients, c)
	}
	events, err := newEventReader(o.servers[0], o.token, o.clientOpts...)
	if err != nil {
		return err
	}
	start := time.Now()
	footprint, err := smoke(ctx, log, clients[0], events, o)
	if err != nil {
		return fmt.Errorf("smoke: %w", err)
	}
	log.Info("smoke passed", "footprint_milliCPU", footprint.MilliCPU, "footprint_pods", footprint.Pods, "elapsed", time.Since(start).Round(time.Millisecond))
	if o.skipFault {
		return nil
	}
	return fault(ctx, log, clients, events, o, footprint)
}

// appDoc is an App of replicas replicas, 10m CPU and 16Mi each, one per
// zone at most.
func appDoc(project, name string, replicas int) computeapi.WorkloadDocument {
	spec := fmt.Sprintf(`{"replicas": %d, "tier": "OnDemand", "template": {"containers": [{"name": "app", "image": "registry.local/app:1", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}`, replicas)
	return computeapi.WorkloadDocument{ApiVersion: "atoll.dev/v1", Kind: "App", Metadata: computeapi.DocumentMetadata{Project: project, Name: name}, Spec: json.RawMessage(spec)}
}

var lifecycle = []string{"admitted", "scheduled", "propagated", "running"}

// smoke runs one App through the region and returns its quota footprint.
func smoke(ctx context.Context, log *slog.Logger, c *sdk.Client, events *eventReader, o options) (computeapi.Resources, error) {
	project := o.project + "-smoke"
	if _, err := c.CreateWorkload(ctx, project, appDoc(project, "smoke", 3), sdk.NewIdempotencyKey()); err != nil {
		return computeapi.Resources{}, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		w, err := c.Get(ctx, project, "App", "smoke")
		if err == nil && w.Status.Phase == "Running" && w.Status.Ready == 3 && len(w.Status.Zones) == 3 {
			zones := []string{}
			for z, n := range w.Status.Zones {
				zones = append(zones, fmt.Sprintf("%s:%d/%d", z, n.Ready, n.Desired))
			}
			sort.Strings(zones)
			log.Info("smoke App Running", "zones", strings.Join(zones, " "))
			break
		}
		if time.Now().After(deadline) {
			return computeapi.Resources{}, fmt.Errorf("the smoke App is not Running 1/1/1 within 2m (last: %v %w)", w, err)
		}
		time.Sleep(500 * time.Millisecond) // polling the App's status
	}
	// Its running event follows the status that says Running: watch for
	// it, then list once, which must hold every one the watch saw.
	if err := events.await(ctx, project, "smoke", 30*time.Second); err != nil {
		return computeapi.Resources{}, fmt.Errorf("the smoke App's events: %w", err)
	}
	missing, reads, err := events.missingEvents(ctx, project, "smoke")
	switch {
	case err != nil:
		return computeapi.Resources{}, fmt.Errorf("the smoke App's events after %d reads: %w", reads, err)
	case len(missing) > 0 || reads > 1:
		return computeapi.Resources{}, fmt.Errorf("the smoke App's events: missing %v after %d reads (one must do)", missing, reads)
	}
	q, err := c.Quota(ctx, project)
	if err != nil {
		return computeapi.Resources{}, err
	}
	used := onDemand(q)
	if used.Pods != 3 {
		return computeapi.Resources{}, fmt.Errorf("quota of 1 App of 3 replicas counts %d pods", used.Pods)
	}
	if err := c.Delete(ctx, project, "App", "smoke"); err != nil {
		return computeapi.Resources{}, err
	}
	return computeapi.Resources{MilliCPU: used.MilliCPU / 3, MemoryBytes: used.MemoryBytes / 3, Pods: 1}, nil
}

func onDemand(q *computeapi.Quota) computeapi.Resources {
	for _, t := range q.Tiers {
		if t.Tier == "OnDemand" {
			return t.Used
		}
	}
	return computeapi.Resources{}
}

// eventReader lists Apps' events once each and counts the reads that
// reached the list: a list is complete or refused (503), so one read must
// do. The client retries only what the gateway refused before reading
// (429, the rate limit); any other second attempt, the SDK's retry of a
// 503 or of a transport error included, is a re-read.
type eventReader struct {
	c     *sdk.Client
	reads atomic.Int64 // attempts of the read under way that were not a 429

	mu       sync.Mutex
	outcomes []string // each of those attempts' status or error; mu must be held
}

func newEventReader(server, token string, opts ...sdk.Option) (*eventReader, error) {
	r := &eventReader{}
	count := func(req *http.Request, resp *http.Response, err error, elapsed time.Duration, _ int) {
		if !strings.HasSuffix(req.URL.Path, "/events") || (resp != nil && resp.StatusCode == http.StatusTooManyRequests) {
			return
		}
		r.reads.Add(1)
		outcome := fmt.Sprintf("%v after %s", err, elapsed.Round(time.Millisecond))
		if resp != nil {
			outcome = fmt.Sprintf("%s after %s%s", resp.Status, elapsed.Round(time.Millisecond), refusal(resp))
		}
		r.mu.Lock()
		r.outcomes = append(r.outcomes, outcome)
		r.mu.Unlock()
	}
	c, err := sdk.New(server, append([]sdk.Option{sdk.WithToken(token), sdk.WithTimeout(20 * time.Second),
		sdk.WithRetry(6, 200*time.Millisecond, 2*time.Second), sdk.WithHooks(sdk.Hooks{OnResponse: count})}, opts...)...)
	if err != nil {
		return nil, err
	}
	r.c = c
	return r, nil
}

// refusal is a refused answer's message (": <code>: <message>"), read
// from its body, which is put back for the client; "" for a 2xx. It tells
// which refusal a failed run met (the workloads cache, the events stream).
func refusal(resp *http.Response) string {
	if resp.StatusCode < 300 || resp.Body == nil {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if err != nil {
		return fmt.Sprintf(": (body: %v)", err)
	}
	var e computeapi.Error
	if json.Unmarshal(b, &e) != nil {
		return fmt.Sprintf(": %q", b)
	}
	return fmt.Sprintf(": %s: %s (request %s)", e.Code, e.Message, e.RequestId)
}

// missingEvents reads an App's events once and lists the lifecycle events
// they lack; it also says how many reads it took (more than one fails the
// test: a list answered 200 must be complete, never short).
func (r *eventReader) missingEvents(ctx context.Context, project, name string) ([]string, int, error) {
	missing, _, reads, err := r.launch(ctx, project, name)
	return missing, reads, err
}

// launch is missingEvents that also returns the App's launch latency:
// from its first admitted event to its first running one (0 when either
// is missing).
func (r *eventReader) launch(ctx context.Context, project, name string) ([]string, time.Duration, int, error) {
	r.reads.Store(0)
	r.mu.Lock()
	r.outcomes = r.outcomes[:0]
	r.mu.Unlock()
	evs, err := r.c.ListEvents(ctx, project, "App", name, 0)
	reads := int(r.reads.Load())
	if err != nil {
		return nil, 0, reads, err
	}
	var admitted, running time.Time
	for _, e := range evs {
		switch {
		case e.Event == "admitted" && admitted.IsZero():
			admitted = e.Time
		case e.Event == "running" && running.IsZero():
			running = e.Time
		}
	}
	var d time.Duration
	if !admitted.IsZero() && !running.IsZero() {
		d = running.Sub(admitted)
	}
	return absent(evs), d, reads, nil
}

// attempts lists the outcome of each read of the last missingEvents.
func (r *eventReader) attempts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outcomes)
}

// await watches an App's events until it has seen every lifecycle event,
// for at most wait.
func (r *eventReader) await(ctx context.Context, project, name string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var seen []computeapi.Event
	done := errors.New("every lifecycle event seen")
	err := r.c.WatchEvents(ctx, project, "App", name, 0, func(e computeapi.Event) error {
		if seen = append(seen, e); len(absent(seen)) == 0 {
			return done
		}
		return nil
	})
	if errors.Is(err, done) {
		return nil
	}
	return fmt.Errorf("watching for %v within %s: %w", absent(seen), wait, err)
}

// absent lists the lifecycle events evs lacks.
func absent(evs []computeapi.Event) []string {
	seen := map[string]bool{}
	for _, e := range evs {
		seen[e.Event] = true
	}
	var missing []string
	for _, want := range lifecycle {
		if !seen[want] {
			missing = append(missing, want)
		}
	}
	return missing
}

// alreadyExists says whether a create was refused because the App exists:
// a retry of one that was written (the same idempotency key and spec). Any
// other 409 (QuotaExceeded, a project being deleted) is a refusal.
func alreadyExists(err error) bool {
	var e *sdk.Error
	return errors.As(err, &e) && e.Status == http.StatusConflict && e.Body.Code == "AlreadyExists"
}

// fault submits o.n Apps while the faults run, then counts.
func fault(ctx context.Context, log *slog.Logger, clients []*sdk.Client, events *eventReader, o options, footprint computeapi.Resources) error {
	// Room for every App whatever the region's default quota: the test
	// counts what the region loses, not what its quota refuses.
	room := int64(2 * o.n)
	if _, err := clients[0].SetQuota(ctx, o.project, "OnDemand", computeapi.QuotaLimit{
		Pods: &room, MilliCPU: new(footprint.MilliCPU * room), MemoryBytes: new(footprint.MemoryBytes * room)}); err != nil {
		return fmt.Errorf("quota of project %s: %w", o.project, err)
	}
	start := time.Now()
	var accepted sync.Map // name -> true
	var failed, attempts atomic.Int64
	interval := time.Duration(float64(time.Second) / o.rate)
	window := time.Duration(o.n) * interval

	faultsDone := make(chan []string)
	go func() { faultsDone <- o.region.injectFaults(ctx, log, o, window) }()

	var wg sync.WaitGroup
	tick := time.NewTicker(interval)
	for i := range o.n {
		<-tick.C // pacing the submissions is the subject: they must span the faults
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("app-%04d", i)
			key := "chaos-" + o.project + "-" + name // one key per App, across every retry and gateway
			deadline := time.Now().Add(2 * time.Minute)
			for try := 0; ; try++ {
				attempts.Add(1)
				c := clients[(i+try)%len(clients)]
				_, err := c.CreateWorkload(ctx, o.project, appDoc(o.project, name, 1), key)
				if err == nil || alreadyExists(err) {
					accepted.Store(name, true)
					return
				}
				if time.Now().After(deadline) {
					failed.Add(1)
					log.Warn("submission abandoned", "app", name, "err", err)
					return
				}
				time.Sleep(500 * time.Millisecond) // backing off before the other gateway
			}
		}()
	}
	tick.Stop()
	wg.Wait()
	submitted := time.Since(start)
	faults := <-faultsDone
	var names []string
	accepted.Range(func(k, _ any) bool { names = append(names, k.(string)); return true })
	sort.Strings(names)
	log.Info("submissions done", "accepted", len(names), "abandoned", failed.Load(), "attempts", attempts.Load(), "elapsed", submitted.Round(time.Second), "faults", strings.Join(faults, ", "))

	// Convergence: every accepted App Running with its replica ready.
	c := clients[0]
	convergeStart := time.Now()
	var notRunning []string
	for {
		items, err := c.ListAll(ctx, o.project, computeapi.ListWorkloadsParams{})
		if err == nil {
			byName := map[string]computeapi.Workload{}
			for _, w := range items {
				byName[w.Metadata.Name] = w
			}
			notRunning = notRunning[:0]
			for _, n := range names {
				w, ok := byName[n]
				if !ok || w.Status.Phase != "Running" || w.Status.Ready != 1 {
					notRunning = append(notRunning, n)
				}
			}
			if len(notRunning) == 0 {
				break
			}
		}
		if time.Since(convergeStart) > o.converge {
			break
		}
		time.Sleep(2 * time.Second) // polling the region until it converges
	}
	converge := time.Since(convergeStart)
	total := time.Since(start)

	// Duplicates: the Deployments of the project in each member cluster.
	perApp := map[string]int{}
	dupes := map[string]bool{}
	for _, z := range []string{"a", "b", "c"} {
		deps, err := o.region.deployments(ctx, "zone-"+z, "atoll-"+o.project)
		if err != nil {
			return err
		}
		for app, n := range deps {
			perApp[app] += n.count
			if n.count > 1 || n.replicas > 1 {
				dupes[app] = true
			}
		}
	}
	for app, n := range perApp {
		if n > 1 {
			dupes[app] = true
		}
	}
	// Apps that exist but were never acknowledged are not duplicates: an
	// abandoned submission may still have been admitted.
	items, err := c.ListAll(ctx, o.project, computeapi.ListWorkloadsParams{})
	if err != nil {
		return err
	}
	want := computeapi.Resources{MilliCPU: footprint.MilliCPU * int64(len(items)), MemoryBytes: footprint.MemoryBytes * int64(len(items)), Pods: int64(len(items))}
	// The ledger may settle after the Apps run (quota repairs intents): it
	// gets -quota-settle to equal the sum.
	var used computeapi.Resources
	quotaStart := time.Now()
	for {
		q, err := c.Quota(ctx, o.project)
		if err != nil {
			return err
		}
		if used = onDemand(q); used == want || time.Since(quotaStart) > o.quotaSettle {
			break
		}
		time.Sleep(2 * time.Second) // polling the ledger until it settles
	}
	quotaWait := time.Since(quotaStart)
	var noEvents []string
	reread := 0
	var rereads []string
	var launches []time.Duration
	for _, n := range names {
		missing, launch, reads, err := events.launch(ctx, o.project, n)
		if launch > 0 {
			launches = append(launches, launch)
		}
		if reads > 1 {
			reread++
			rereads = append(rereads, fmt.Sprintf("%s:%d %v", n, reads, events.attempts()))
		}
		switch {
		case err != nil:
			noEvents = append(noEvents, fmt.Sprintf("%s: %v", n, err))
		case len(missing) > 0:
			noEvents = append(noEvents, fmt.Sprintf("%s:%v", n, missing))
		}
	}
	fmt.Printf("fault test: submitted=%d accepted=%d abandoned=%d existing=%d converged=%d lost=%d duplicated=%d\n",
		o.n, len(names), failed.Load(), len(items), len(names)-len(notRunning), len(notRunning), len(dupes))
	fmt.Printf("  quota used cpu=%dm mem=%d pods=%d, sum of the Apps' footprints cpu=%dm mem=%d pods=%d: %s (after %s)\n",
		used.MilliCPU, used.MemoryBytes, used.Pods, want.MilliCPU, want.MemoryBytes, want.Pods, map[bool]string{true: "equal", false: "DIFFERENT"}[used == want], quotaWait.Round(time.Second))
	fmt.Printf("  events: %d of %d accepted Apps lack admitted/scheduled/propagated/running (%d needed more than one read)\n", len(noEvents), len(names), reread)
	fmt.Printf("  launch (admitted → running, from each App's events): %s\n", launchSummary(launches))
	fmt.Printf("  faults: %s\n", strings.Join(faults, ", "))
	fmt.Printf("  time: submissions %s, converged %s after them, total %s\n", submitted.Round(time.Second), converge.Round(time.Second), total.Round(time.Second))
	var errs []error
	if len(notRunning) > 0 {
		errs = append(errs, fmt.Errorf("%d accepted Apps not Running: %v", len(notRunning), head(notRunning)))
	}
	if len(dupes) > 0 {
		var d []string
		for k := range dupes {
			d = append(d, k)
		}
		errs = append(errs, fmt.Errorf("%d Apps duplicated: %v", len(dupes), head(d)))
	}
	if used != want {
		errs = append(errs, errors.New("quota usage is not the sum of the Apps"))
	}
	if len(noEvents) > 0 {
		errs = append(errs, fmt.Errorf("%d Apps lack lifecycle events: %v", len(noEvents), head(noEvents)))
	}
	if len(rereads) > 0 {
		errs = append(errs, fmt.Errorf("%d Apps' events needed more than one read (a list answered 200 must be complete): %v", len(rereads), head(rereads)))
	}
	for _, f := range faults {
		if strings.Contains(f, "FAILED") {
			errs = append(errs, fmt.Errorf("a fault was not injected as it should: %s", f))
		}
	}
	if len(names) < o.n*9/10 {
		errs = append(errs, fmt.Errorf("only %d of %d submissions accepted", len(names), o.n))
	}
	if r, ok := o.region.(interface {
		report(ctx context.Context, from, to time.Time) error
	}); ok {
		if err := r.report(ctx, start, time.Now()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sloLaunch is the launch-latency objective's bound (deploy/prometheus/rules/slos.yaml).
const sloLaunch = 40960 * time.Millisecond

// launchSummary is the P50, P99 and max of the launches, and how many took
// longer than the objective's bound.
func launchSummary(d []time.Duration) string {
	if len(d) == 0 {
		return "none measured"
	}
	slices.Sort(d)
	at := func(q float64) time.Duration {
		return d[min(len(d)-1, int(q*float64(len(d))))].Round(10 * time.Millisecond)
	}
	over := 0
	for _, x := range d {
		if x > sloLaunch {
			over++
		}
	}
	return fmt.Sprintf("%d Apps, P50 %v, P99 %v, max %v; %d over the objective's %v", len(d), at(0.5), at(0.99), d[len(d)-1].Round(10*time.Millisecond), over, sloLaunch)
}

func head(s []string) []string {
	slices.Sort(s)
	return s[:min(10, len(s))]
}

type deployment struct{ count, replicas int }

// composeRegion is the Compose region: containers <project>_<service>_<i>.
type composeRegion struct{ project string }

// deployments lists a namespace's Deployments in a member cluster, per
// workload label, with kubectl inside the member's container (the members
// network is not reachable from the host), as the aggregator, which reads.
func (r composeRegion) deployments(ctx context.Context, cluster, namespace string) (map[string]deployment, error) {
	out, err := exec.CommandContext(ctx, "docker", "exec", r.project+"_"+cluster+"_1", "/kubectl", "--kubeconfig", "/kubeconfigs/aggregator/"+cluster+".kubeconfig",
		"get", "deployments", "-n", namespace, "-o", "json").Output()
	if err != nil {
		return nil, fmt.Errorf("list deployments in %s: %w", cluster, err)
	}
	return perWorkload(out)
}

// perWorkload counts a Deployment list's (kubectl -o json) Deployments and
// replicas per workload label.
func perWorkload(out []byte) (map[string]deployment, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec struct {
				Replicas int `json:"replicas"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, err
	}
	m := map[string]deployment{}
	for _, d := range list.Items {
		app := d.Metadata.Labels["atoll.dev/workload"]
		x := m[app]
		x.count++
		x.replicas += d.Spec.Replicas
		m[app] = x
	}
	return m, nil
}

// injectFaults spreads the faults over window: each service replica
// killed once, one NATS server killed, another disconnected for
// o.partition. Killed containers come back by their restart policy (or
// are started). It returns what it did.
func (composeRegion) injectFaults(ctx context.Context, log *slog.Logger, o options, window time.Duration) []string {
	var steps []func() string
	for _, s := range o.services {
		for i := 1; i <= 2; i++ {
			name := fmt.Sprintf("%s_%s_%d", o.compose, s, i)
			steps = append(steps, func() string { return kill(ctx, log, name) })
		}
	}
	// The NATS faults in the middle: a kill, then a partition of another
	// server, which runs beside the kills that follow.
	mid := len(steps) / 2
	natsKill := func() string { return kill(ctx, log, o.compose+"_nats-1_1") }
	partitioned := make(chan string, 1)
	partition := func() string {
		c := o.compose + "_nats-2_1"
		if err := docker(ctx, "network", "disconnect", o.compose+"_bus", c); err != nil {
			partitioned <- ""
			return "partition " + c + " FAILED: " + err.Error()
		}
		log.Info("fault: NATS server disconnected", "container", c, "for", o.partition)
		go func() {
			time.Sleep(o.partition) // the partition's length is the subject
			if err := docker(ctx, "network", "connect", "--alias", "nats-2", o.compose+"_bus", c); err != nil {
				partitioned <- "reconnect " + c + " FAILED: " + err.Error()
				return
			}
			log.Info("fault: NATS server reconnected", "container", c)
			partitioned <- ""
		}()
		return fmt.Sprintf("disconnected %s for %s", c, o.partition)
	}
	steps = slices.Insert(steps, mid, natsKill, partition)
	// Step k at start + k*gap, over the middle 90% of the window.
	start := time.Now()
	gap := window * 9 / 10 / time.Duration(len(steps))
	var done []string
	for k, step := range steps {
		time.Sleep(time.Until(start.Add(window/20 + time.Duration(k)*gap))) // spreading the faults over the submissions is the subject
		done = append(done, step())
	}
	if msg := <-partitioned; msg != "" {
		done = append(done, msg)
	}
	return done
}

// kill kills a container, as a crash would, and starts it again a second
// later, as an orchestrator would (the engine does not restart a container
// it was told to kill).
func kill(ctx context.Context, log *slog.Logger, name string) string {
	if err := docker(ctx, "kill", name); err != nil {
		return "kill " + name + " FAILED: " + err.Error()
	}
	log.Info("fault: killed", "container", name)
	time.Sleep(time.Second) // the time it stays dead is the subject
	if err := docker(ctx, "start", name); err != nil {
		return "killed " + name + ", start FAILED: " + err.Error()
	}
	return "killed " + name
}

func docker(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
