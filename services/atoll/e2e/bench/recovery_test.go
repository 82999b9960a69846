package bench

// BenchmarkRecovery measures how long Apps submitted around a disturbance
// wait to be Running (issue 36 point 5): a region of processes (each
// replica its own binary, region.Options.Exec) holding a fill of stopped
// Apps, Apps of one pod submitted at a steady rate in windows of
// recoveryWindow, one window undisturbed and one centred on each
// disturbance: a service's lease holder SIGKILLed and started again
// recoveryRestart later, or the NATS server stopped and started again
// after the same pause. It runs once with one replica of every service (the
// killed replica itself comes back) and once with two (the standby takes
// over). For every window it prints submit → Running P50, P99 and max,
// and the median of each step (admitted, scheduled, propagated, running)
// so that the seconds can be placed.
//
//	ATOLL_BIN_DIR=/work/main/bin go test ./e2e/bench -run '^$' -bench Recovery -benchtime 1x -timeout 60m
//
// ATOLL_BENCH_RECOVERY_WORKLOADS sets the fill (default 100; from
// ATOLL_BENCH_RECOVERY_SEED_FROM, 1,000, seeded as BenchmarkRegionScale
// seeds, over its 100 projects: seedFill),
// ATOLL_BENCH_RECOVERY_REPLICAS the replica counts run (default "1,2"),
// ATOLL_BENCH_RECOVERY_RATE the submissions per second (default 5),
// ATOLL_BENCH_RECOVERY_EXEC a directory of the services' binaries built
// beforehand (by default they are built from this tree).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

var (
	recoveryWorkloads = envInt("ATOLL_BENCH_RECOVERY_WORKLOADS", 100)
	recoveryReplicas  = envSizes("ATOLL_BENCH_RECOVERY_REPLICAS", []int{1, 2})
	recoveryRate      = envInt("ATOLL_BENCH_RECOVERY_RATE", 5)
	// recoverySeedFrom is the fill from which the region is seeded
	// (seedFill) instead of submitted App by App.
	recoverySeedFrom = envInt("ATOLL_BENCH_RECOVERY_SEED_FROM", 1000)
)

const (
	recoveryProject = "recovery"
	// recoveryWindow is how long each window submits; a disturbance
	// starts at its middle.
	recoveryWindow = 10 * time.Second
	// recoveryRestart is the pause between a kill and the restart.
	recoveryRestart = 2 * time.Second
	// recoveryWait bounds the wait for a window's Apps to be Running.
	recoveryWait = 2 * time.Minute
)

// disturbance is what happens at the middle of a window.
type disturbance struct {
	name string
	// service is the service whose lease holder is killed ("" for none, "nats" for the bus).
	service string
}

var disturbances = []disturbance{
	{"undisturbed", ""},
	{"scheduler kill", "scheduler"},
	{"aggregator kill", "aggregator"},
	{"propagator kill", "propagator"},
	{"NATS restart", "nats"},
}

// recoveryLog records, per App, the first attempt to submit it and the
// first arrival of each of its events and of a Running status.
type recoveryLog struct {
	mu        sync.Mutex
	submitted map[string]time.Time            // mu must be held
	events    map[string]map[string]time.Time // mu must be held; event -> App -> first arrival
	running   map[string]time.Time            // mu must be held; App -> first Running status
}

func (l *recoveryLog) observe(m *nats.Msg) {
	now := time.Now()
	parts := strings.Split(m.Subject, ".") // atoll.evt.<project>.app.<name>.<event>
	if len(parts) != 6 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.events[parts[5]] == nil {
		l.events[parts[5]] = map[string]time.Time{}
	}
	if _, ok := l.events[parts[5]][parts[4]]; !ok {
		l.events[parts[5]][parts[4]] = now
	}
}

// watch records the Apps whose status turns Running, at the time the
// status was written; the watch survives a restart of the bus (an ordered
// consumer).
func (l *recoveryLog) watch(ctx context.Context, b *bus.Bus) error {
	kv, err := b.KV(ctx, bus.BucketStatus)
	if err != nil {
		return err
	}
	w, err := kv.Watch(ctx, api.Key(recoveryProject, api.KindApp, "*"), jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("watch statuses: %w", err)
	}
	go func() {
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var st api.Status
			if json.Unmarshal(e.Value(), &st) != nil || st.Phase != api.PhaseRunning {
				continue
			}
			_, _, name, err := api.ParseKey(e.Key())
			if err != nil {
				continue
			}
			// The time the status was written (the server's stamp), not
			// the time this watch saw it: after a restart of the bus the
			// watch's ordered consumer is recreated only once it misses
			// its heartbeats, and its catching up is not the region's
			// delay.
			l.mu.Lock()
			if _, ok := l.running[name]; !ok {
				l.running[name] = e.Created()
			}
			l.mu.Unlock()
		}
	}()
	return nil
}

// windowRow is one window's figures.
type windowRow struct {
	name          string
	n, late       int
	p50, p99, max time.Duration
	steps         [4]time.Duration // median submit → admitted, scheduled, propagated, running
	slowest       [4]time.Duration // the same for the App with the longest wait
}

func (l *recoveryLog) row(name string, apps []string) windowRow {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := windowRow{name: name, n: len(apps)}
	var ds []time.Duration
	var steps [4][]time.Duration
	for _, a := range apps {
		t0 := l.submitted[a]
		run, ok := l.running[a]
		if !ok {
			r.late++
			continue
		}
		ds = append(ds, run.Sub(t0))
		worst := run.Sub(t0) > r.max
		r.max = max(r.max, run.Sub(t0))
		for i, ev := range []string{api.EventAdmitted, api.EventScheduled, api.EventPropagated, api.EventRunning} {
			if t, ok := l.events[ev][a]; ok {
				steps[i] = append(steps[i], t.Sub(t0))
				if worst {
					r.slowest[i] = t.Sub(t0)
				}
			} else if worst {
				r.slowest[i] = 0
			}
		}
	}
	r.p50, r.p99 = percentile(ds, 0.5), percentile(ds, 0.99)
	for i := range steps {
		r.steps[i] = percentile(steps[i], 0.5)
	}
	return r
}

func BenchmarkRecovery(b *testing.B) {
	if testing.Short() {
		b.Skip("needs member clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	log := benchLogger()
	execDir := os.Getenv("ATOLL_BENCH_RECOVERY_EXEC") // prebuilt binaries (region.BuildServices), to compare two trees
	if execDir == "" {
		execDir = b.TempDir()
		if err := region.BuildServices(ctx, execDir); err != nil {
			b.Fatal(err)
		}
	}
	var tables []string
	for _, n := range recoveryReplicas {
		rows := recoveryRun(ctx, b, log, execDir, n)
		var sb strings.Builder
		who := "a single replica restarting"
		if n > 1 {
			who = fmt.Sprintf("%d replicas, the lease holder killed and a standby taking over", n)
		}
		fmt.Fprintf(&sb, "recovery, %d workloads, %s (kill, restart %v later; %d Apps/s for %v per window):\n",
			recoveryWorkloads, who, recoveryRestart, recoveryRate, recoveryWindow)
		fmt.Fprintf(&sb, "  %-16s %4s %4s %8s %8s %8s   %-36s %s\n", "window", "apps", "late", "P50", "P99", "max", "median submit→admitted/sched/prop/run", "the slowest App's")
		for _, r := range rows {
			steps := func(d [4]time.Duration) string {
				return fmt.Sprintf("%v / %v / %v / %v", d[0].Round(100*time.Millisecond), d[1].Round(100*time.Millisecond), d[2].Round(100*time.Millisecond), d[3].Round(100*time.Millisecond))
			}
			fmt.Fprintf(&sb, "  %-16s %4d %4d %8v %8v %8v   %-36s %s\n", r.name, r.n, r.late,
				r.p50.Round(100*time.Millisecond), r.p99.Round(100*time.Millisecond), r.max.Round(100*time.Millisecond), steps(r.steps), steps(r.slowest))
		}
		tables = append(tables, sb.String())
		b.Log("\n" + sb.String())
	}
	fmt.Println(strings.Join(tables, "\n"))
}

// recoveryRun starts a region of n replicas per service, fills it and
// measures each disturbance's window.
func recoveryRun(ctx context.Context, b *testing.B, log *slog.Logger, execDir string, n int) []windowRow {
	b.Helper()
	// A few nodes per zone hold every window's pods; the clusters at the
	// region's own priority, so that a busy machine does not starve them.
	opts := region.Options{Dir: b.TempDir(), Nodes: 4, Logger: log, Replicas: n, Exec: execDir, RestartableBus: true,
		ExecLogLevel: os.Getenv("ATOLL_BENCH_LOG")}
	if d := os.Getenv("ATOLL_BENCH_RECOVERY_DIR"); d != "" {
		opts.Dir = fmt.Sprintf("%s/replicas-%d", d, n) // kept after the run, with the processes' logs
	}
	reg, err := region.Start(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Stop(context.Background())
	cl, gw := regionClient(b, reg)
	defer gw.Close()
	lim := api.Limit{MilliCPU: new(int64(1 << 40)), MemoryBytes: new(int64(1 << 60)), Pods: new(int64(1 << 30))}
	if err := cl.SetQuota(ctx, recoveryProject, api.TierOnDemand, lim); err != nil {
		b.Fatal(err)
	}
	if recoveryWorkloads >= recoverySeedFrom {
		regionUsage, processes = usageOf(b, reg), reg
		defer func() { regionUsage, processes = selfUsage, nil }()
		if err := seedFill(ctx, reg, cl, recoveryWorkloads); err != nil {
			b.Fatal(err)
		}
	} else {
		admin := bus.NewRequester(gw.NC, bus.RequestPolicy{})
		for i := range recoveryWorkloads {
			if _, err := submitFill(ctx, admin, recoveryProject, i); err != nil {
				b.Fatalf("fill %d: %v", i, err)
			}
		}
	}
	l := &recoveryLog{submitted: map[string]time.Time{}, events: map[string]map[string]time.Time{}, running: map[string]time.Time{}}
	if err := l.watch(ctx, reg.Bus); err != nil {
		b.Fatal(err)
	}
	sub, err := reg.Bus.NC.Subscribe(bus.EventSubject(recoveryProject, api.KindApp, "*", "*"), l.observe)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)

	var rows []windowRow
	for wi, d := range disturbances {
		var apps []string
		var wg sync.WaitGroup
		tick := time.NewTicker(time.Second / time.Duration(recoveryRate))
		start := time.Now()
		disturbed := false
		for i := 0; time.Since(start) < recoveryWindow; i++ {
			if !disturbed && time.Since(start) >= recoveryWindow/2 {
				disturbed = true
				if err := disturb(ctx, reg, d.service, &wg); err != nil {
					b.Fatalf("%s: %v", d.name, err)
				}
			}
			name := fmt.Sprintf("w%d-%03d", wi, i)
			apps = append(apps, name)
			l.mu.Lock()
			l.submitted[name] = time.Now()
			l.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				submitRetrying(ctx, cl, name)
			}()
			<-tick.C
		}
		tick.Stop()
		wg.Wait()
		deadline := time.Now().Add(recoveryWait)
		for time.Now().Before(deadline) {
			l.mu.Lock()
			done := 0
			for _, a := range apps {
				if _, ok := l.running[a]; ok {
					done++
				}
			}
			l.mu.Unlock()
			if done == len(apps) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		rows = append(rows, l.row(d.name, apps))
		// Let every replica settle (a standby campaigning, caches
		// refilled) before the next window.
		time.Sleep(5 * time.Second)
	}
	return rows
}

// seedFill fills the region with n Apps at 0 replicas over
// regionProjects projects the way BenchmarkRegionScale does (its file
// comment): a template App per project through admission, then, with
// every service stopped, copies of each template's records written
// straight into the buckets and the events stream; every service is
// started again and the region left to be quiet (the propagator creates
// the copies' objects in the member clusters) before the windows.
func seedFill(ctx context.Context, reg *region.Region, cl *busclient.Client, n int) error {
	projects := make([]string, regionProjects)
	lim := api.Limit{MilliCPU: new(int64(1 << 40)), MemoryBytes: new(int64(1 << 60)), Pods: new(int64(1 << 30))}
	for i := range projects {
		projects[i] = regionProject(i)
		if err := cl.SetQuota(ctx, projects[i], api.TierOnDemand, lim); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if err := submitAll(ctx, cl, projects, 0); err != nil {
		return err
	}
	if err := waitStatuses(ctx, reg.Bus, projects, 0); err != nil {
		return err
	}
	tpls := make([]template, len(projects))
	for i, p := range projects {
		var err error
		if tpls[i], err = readTemplate(ctx, reg.Bus, p); err != nil {
			return err
		}
	}
	idle := 100.0
	for range 3 {
		c, err := cpuOver(ctx, quietWindow)
		if err != nil {
			return err
		}
		idle = min(idle, c)
	}
	for i := len(region.Services) - 1; i >= 0; i-- {
		if err := reg.StopService(ctx, region.Services[i].Name); err != nil {
			return err
		}
	}
	per := max(0, n/len(projects)-1)
	if err := seedRegion(ctx, reg.Bus, tpls, 0, per); err != nil {
		return err
	}
	for _, s := range region.Services {
		if err := reg.StartService(ctx, s.Name); err != nil {
			return err
		}
	}
	quiet, err := settle(ctx, idle, seedSettle(per*len(projects)))
	if err != nil {
		return err
	}
	fmt.Printf("recovery: %d Apps seeded over %d projects; the region quiet %v, %v after the start\n",
		(per+1)*len(projects), len(projects), quiet, time.Since(t0).Round(time.Second))
	return nil
}

// disturb kills the holder of one of service's leases (or stops the bus)
// and starts it again recoveryRestart later, in the background (wg).
func disturb(ctx context.Context, reg *region.Region, service string, wg *sync.WaitGroup) error {
	switch service {
	case "":
		return nil
	case "nats":
		if err := reg.StopBus(); err != nil {
			return err
		}
		stopped := time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(recoveryRestart)
			start := time.Now()
			if err := reg.StartBus(); err != nil {
				slog.Error("restart the bus", "err", err)
				return
			}
			fmt.Printf("recovery: nats stopped at %s, started %v later, up %v after its start\n",
				stopped.UTC().Format("15:04:05.000"), start.Sub(stopped).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		}()
		return nil
	}
	i, err := leaseHolderOf(ctx, reg, service)
	if err != nil {
		return err
	}
	if err := reg.Kill(service, i); err != nil {
		return err
	}
	killed := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(recoveryRestart)
		start := time.Now()
		if err := reg.StartReplica(ctx, service, i); err != nil {
			slog.Error("restart a replica", "service", service, "replica", i, "err", err)
			return
		}
		// Where a window's seconds go starts here: the restarted
		// process's own start, to /readyz (the services' logs, kept with
		// ATOLL_BENCH_RECOVERY_DIR, tell the rest).
		fmt.Printf("recovery: %s-%d killed at %s, started %v later, ready %v after its start\n", service, i,
			killed.UTC().Format("15:04:05.000"), start.Sub(killed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}()
	return nil
}

// leaseHolderOf returns the replica of service holding the first of its
// leases (sorted by name); 0 with a single replica.
func leaseHolderOf(ctx context.Context, reg *region.Region, service string) (int, error) {
	if reg.Replicas() == 1 {
		return 0, nil
	}
	names, err := reg.Leases(ctx)
	if err != nil {
		return 0, err
	}
	for _, name := range names {
		id, _, err := reg.Holder(ctx, name)
		if err == nil && id.Service == service {
			return id.Index, nil
		}
	}
	return 0, fmt.Errorf("no lease of %s held (leases %v)", service, names)
}

// submitRetrying submits App name until it is accepted: during an outage
// the user retries, and the wait counts from the first attempt.
func submitRetrying(ctx context.Context, cl interface {
	Submit(context.Context, []byte) (*api.Workload, error)
}, name string) {
	doc := []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":1,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`,
		recoveryProject, name))
	for ctx.Err() == nil {
		_, err := cl.Submit(ctx, doc)
		if err == nil || strings.Contains(err.Error(), "AlreadyExists") {
			return
		}
		var re *bus.RemoteError
		if errors.As(err, &re) && re.Code < 500 && re.Code != 429 {
			slog.Error("submit refused", "app", name, "err", err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
