package bench

// The region-size benchmark: what does a region of N workloads cost each
// service at start, at rest and per submission? (issue 36, point 4)
//
// One region (3 KWOK member clusters, every service its own process of
// its own binary and the NATS server a nats-server process, as in
// BenchmarkScale) holds, in turn, regionBase workloads (1,000: the
// baseline) and each of regionSizes (ATOLL_REGION_WORKLOADS, default
// 10,000 and 100,000), spread over regionProjects projects (100). At each
// size the bench:
//
//  1. stops every service (SIGTERM), seeds the region up to the size
//     (seedRegion, below) and starts every service again, timing each
//     start (cold: the services start in region.Services order);
//  2. waits until the region is quiet (up to seedSettle: the propagator
//     first creates the copies' objects in the member clusters) and the
//     events stream's duplicate window has passed since the seed (the
//     server expires the seeded events' idempotency keys then), then
//     measures its CPU use over
//     regionIdle (60 s) with nothing submitted: the services' processes
//     and the nats-server process, not this one;
//  3. restarts each service in turn the way a crash does (SIGKILL, then
//     start) and times its process start -> /readyz 200 (region.StartReplica
//     polls /readyz every 50 ms), then reads its resident memory
//     (/proc/<pid>/status VmRSS) and Go heap once the region is quiet
//     again (or settleCap after the start). What /readyz waits for is
//     each service's own Ready: a lease's state known, not held, so a
//     replica restarted after SIGKILL is ready before the dead holder's
//     lease has expired; the caches that hold every workload fill behind
//     it (the gateway's, scheduler's and propagator's, whose
//     atoll_caches_filled gauge the bench then polls until 1, the time
//     printed as "filled": it is when the replica can take a lease);
//  4. measures regionRounds rounds of submit -> admitted and submit ->
//     propagated (BenchmarkScale's measure: paused Apps of 1 replica,
//     open loop at scaleRate) into a project of its own that holds
//     nothing else, so that only the region's size differs between sizes.
//
// What fills the region. Apps at 0 replicas (a whole workload in every
// store: its key in the workloads bucket, a reservation in the quota
// bucket counted in the project's ledger, a placement, a status Running
// 0/0, its events) and regionRunning (300) small Apps of one pod each,
// submitted through admission before the first size and kept, so the
// member clusters hold some real pods but stay within this machine (their
// controllers run: unlike BenchmarkScale's, these Apps need their pods).
//
// How the 0-replica Apps are seeded: cloned, not submitted. Each
// project first gets one App at 0 replicas submitted through admission
// (the template) and taken through the whole pipeline; the bench then
// reads every record the services wrote for it (every key that names it
// in the buckets the services keep per workload, and its messages in the
// events stream) and writes, with the services stopped, one copy per
// seeded App straight into the same buckets and stream: the template's
// records byte for byte, with the App's name and uid replaced, and each
// event's idempotency key naming the copy's revision where the
// template's named the template's (ownRevision: else the services would
// announce every copy again). The
// project's ledger is brought to count the copies (reservations and
// transaction count; a 0-replica App's demand is 0, and the template's
// demand is added per copy anyway). The services then start from the
// state they would have after as many real submissions, written by their
// own code, only without the 10-20 minutes the submissions would take on
// this machine at 100,000 (BenchmarkScale's fill through admission runs
// at a few hundred Apps a second with nothing else to do, and this
// machine is shared). What is not copied, because no service reads it back: the
// audit stream's records and the admission idempotency keys of the
// template's request (printed with the template's records).
//
// The P99 baseline. The issue asks for submit -> propagated at each size
// against a region holding 1,000, interleaved as the project-size bench
// does. A region's size cannot be interleaved within one region (the
// project-size bench interleaves two projects of one region), and a second
// region of 3 member clusters beside the first does not fit this 2-core
// machine: the baseline here is the same region measured at 1,000 in the
// same run, minutes before, with the same rounds. The ratio therefore
// carries the machine's drift between sizes (see BenchmarkScale's comment
// on measurements across time), and each round's P99 is printed so a
// stalled round can be told from a size.
//
// The targets (the issue's): every service ready within 30 s of its
// process start at every size and within 1.2x of its time at the first
// of regionSizes; the region's idle CPU at most 5% of a core. The bench
// prints whether each holds and does not fail on them; it fails on a
// failed seed, a service that does not start, or lost submissions.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

// Region-size parameters, overridable from the environment.
var (
	// regionSizes are the region sizes measured (workloads in all),
	// ascending; the first is the baseline of the readiness ratios.
	regionSizes = envSizes("ATOLL_REGION_WORKLOADS", []int{10000, 100000})
	// regionBase is the size measured first, the P99 baseline.
	regionBase = envInt("ATOLL_REGION_BASE", 1000)
	// regionProjects is how many projects the workloads are spread over.
	regionProjects = envInt("ATOLL_REGION_PROJECTS", 100)
	// regionRunning is how many small Apps of one pod each are submitted
	// through admission before the first size and kept.
	regionRunning = envInt("ATOLL_REGION_RUNNING", 300)
	// regionRounds and regionSubmissions are the P99 rounds at each size
	// and the submissions in each.
	regionRounds      = envInt("ATOLL_REGION_ROUNDS", 3)
	regionSubmissions = envInt("ATOLL_REGION_SUBMISSIONS", 300)
	// regionIdle is how long the idle region's CPU use is measured: long
	// enough to hold every process's periodic collection (the runtime
	// forces one every two minutes) at least once. Over one minute, a
	// collection of a 150 MB heap falling in the window or not moved the
	// figure at 100,000 by as much as the changes being measured (6.5-6.9%
	// in three one-minute runs of stop 53's trees, 6.2% over four minutes
	// of the last of them).
	regionIdle = time.Duration(envInt("ATOLL_REGION_IDLE_SECONDS", 180)) * time.Second
)

const (
	// regionTemplate is the name of each project's template App.
	regionTemplate = "rstemplate"
	// regionMeasureProject receives the measured submissions.
	regionMeasureProject = "rs-measure"
	// readyTarget and readyRatioTarget are the targets for a
	// service's start; idleTarget for the idle region, in percent of a core.
	readyTarget      = 30 * time.Second
	readyRatioTarget = 1.2
	idleTarget       = 5.0
	// settleCap bounds each wait for the region to be quiet between
	// restarts.
	settleCap = 20 * time.Second
)

// seedSettle bounds the wait for the region to be quiet after the
// services start on n newly seeded copies: settleCap and 10 ms a copy
// (the propagator creates each copy's objects in its member cluster).
func seedSettle(n int) time.Duration { return settleCap + time.Duration(n)*10*time.Millisecond }

// regionProject is the name of project i.
func regionProject(i int) string { return fmt.Sprintf("rs-p%03d", i) }

// seededName is the name of seeded App i of a project (fillPrefix: the
// event log counts no such App as measured).
func seededName(i int) string { return fmt.Sprintf("%s%06d", fillPrefix, i) }

// zeroDoc is an App of 0 replicas.
func zeroDoc(project, name string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":0,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`,
		project, name))
}

// smallDoc is an App of one small pod.
func smallDoc(project, name string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":1,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`,
		project, name))
}

// record is one stored record of a template App: a key of a bucket, or a
// message of a stream.
type record struct {
	bucket, key string      // a bucket's key; bucket "" for a message
	rev         uint64      // a key's revision
	subject     string      // a message's subject
	header      nats.Header // a message's header
	// revOf is, for an event whose idempotency key names the revision of
	// one of the template's records, that record's index (see
	// ownRevision); -1 otherwise.
	revOf int
	value []byte
}

// template is what the services stored for a project's template App.
type template struct {
	project string
	uid     string
	demand  api.Demand
	records []record
}

// perWorkloadBuckets are the buckets searched for a template's keys:
// every bucket a service keeps per-workload records in.
var perWorkloadBuckets = []string{
	bus.BucketWorkloads, bus.BucketQuota, bus.BucketPlacements, bus.BucketStatus, bus.BucketObservations,
	bus.BucketScalers, bus.BucketDisruption, bus.BucketRollouts, bus.BucketSidecars, bus.BucketIdempotency,
}

// readTemplate reads every record naming project's template App: its
// keys in perWorkloadBuckets and its messages in the events stream.
func readTemplate(ctx context.Context, b *bus.Bus, project string) (template, error) {
	t := template{project: project}
	for _, name := range perWorkloadBuckets {
		kv, err := b.KV(ctx, name)
		if err != nil {
			continue // a bucket this region does not create
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return t, fmt.Errorf("list %s: %w", name, err)
		}
		for k := range keys.Keys() {
			if !strings.Contains(k, regionTemplate) || !strings.Contains(k, project) {
				continue
			}
			e, err := kv.Get(ctx, k)
			if err != nil {
				return t, fmt.Errorf("get %s %s: %w", name, k, err)
			}
			t.records = append(t.records, record{bucket: name, key: k, rev: e.Revision(), revOf: -1, value: e.Value()})
			switch name {
			case bus.BucketWorkloads:
				var w api.Workload
				if err := json.Unmarshal(e.Value(), &w); err != nil {
					return t, fmt.Errorf("template %s: %w", k, err)
				}
				t.uid = w.Metadata.UID
			case bus.BucketQuota:
				var r api.Reservation
				if err := json.Unmarshal(e.Value(), &r); err != nil {
					return t, fmt.Errorf("template reservation %s: %w", k, err)
				}
				t.demand = r.Demand
			}
		}
	}
	if t.uid == "" {
		return t, fmt.Errorf("template of %s: no workload", project)
	}
	cons, err := b.JS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventSubject(project, api.KindApp, regionTemplate, "*")}})
	if err != nil {
		return t, fmt.Errorf("events of %s: %w", project, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return t, fmt.Errorf("events of %s: %w", project, err)
	}
	for n := info.NumPending; n > 0; {
		batch, err := cons.Fetch(int(n), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return t, fmt.Errorf("events of %s: %w", project, err)
		}
		got := 0
		for m := range batch.Messages() {
			t.records = append(t.records, record{subject: m.Subject(), header: m.Headers(), revOf: -1, value: m.Data()})
			got++
		}
		if got == 0 {
			return t, fmt.Errorf("events of %s: %d pending, none delivered", project, n)
		}
		n -= uint64(got)
	}
	linkRevisions(t.records)
	return t, nil
}

// describe lists a template's records by bucket or stream.
func (t template) describe() string {
	by := map[string]int{}
	linked := 0
	for _, r := range t.records {
		if r.revOf >= 0 {
			linked++
		}
		if r.bucket != "" {
			by[r.bucket]++
		} else {
			by[bus.StreamEvents]++
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, by[k]))
	}
	return fmt.Sprintf("%s (%d events name a record's revision: the copy's)", strings.Join(parts, ", "), linked)
}

// newUID returns a random uid of the template's form (a UUID when it is
// one, else hex of its length).
func newUID(like string) string {
	buf := make([]byte, 16)
	_, _ = rand.Read(buf)
	h := hex.EncodeToString(buf)
	if len(like) == 36 && strings.Count(like, "-") == 4 {
		return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
	}
	for len(h) < len(like) {
		h += h
	}
	return h[:len(like)]
}

// seedRegion writes copies of each project's template, named
// seededName(from..to-1), into the buckets and the events stream (see the
// file comment), then brings each project's ledger to count them. The
// services must be stopped.
func seedRegion(ctx context.Context, b *bus.Bus, tpls []template, from, to int) error {
	if to <= from {
		return nil
	}
	var (
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	js, err := jetstream.New(b.NC, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			fail(fmt.Errorf("seed %s: %w", m.Subject, err))
		}))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, t := range tpls {
		wg.Go(func() {
			acks := make([]jetstream.PubAckFuture, len(t.records)) // by record
			seqs := make([]uint64, len(t.records))
			for i := from; i < to && ctx.Err() == nil; i++ {
				name, uid := seededName(i), newUID(t.uid)
				subst := strings.NewReplacer(regionTemplate, name, t.uid, uid)
				clear(seqs)
				for k, r := range t.records {
					msg := &nats.Msg{Data: []byte(subst.Replace(string(r.value)))}
					if r.bucket != "" {
						msg.Subject = "$KV." + r.bucket + "." + subst.Replace(r.key)
					} else {
						msg.Subject = subst.Replace(r.subject)
						msg.Header = nats.Header{}
						for k, vs := range r.header {
							for _, v := range vs {
								msg.Header.Add(k, subst.Replace(v))
							}
						}
						if err := ownRevision(ctx, msg.Header, r, acks, seqs); err != nil {
							fail(fmt.Errorf("seed %s/%s: %w", t.project, name, err))
							return
						}
					}
					f, err := js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute))
					if err != nil {
						fail(fmt.Errorf("seed %s/%s: %w", t.project, name, err))
						return
					}
					acks[k] = f
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	if first != nil {
		return first
	}
	kv, err := b.KV(ctx, bus.BucketQuota)
	if err != nil {
		return err
	}
	added := int64(to - from)
	for _, t := range tpls {
		_, err := bus.Update(ctx, kv, api.QuotaProjectKey(t.project), func(cur []byte, exists bool) ([]byte, error) {
			if !exists {
				return nil, fmt.Errorf("no ledger for %s", t.project)
			}
			var l api.Ledger
			if err := json.Unmarshal(cur, &l); err != nil {
				return nil, err
			}
			l.Reservations += added
			l.Seq += uint64(added)
			if d := t.demand; d.MilliCPU != 0 || d.MemoryBytes != 0 || d.GPUs != 0 || d.Pods != 0 || d.StorageBytes != 0 {
				if l.Usage == nil {
					l.Usage = map[api.Tier]api.Demand{}
				}
				u := l.Usage[d.Tier]
				u.Tier = d.Tier
				u.MilliCPU += added * d.MilliCPU
				u.MemoryBytes += added * d.MemoryBytes
				u.GPUs += added * d.GPUs
				u.Pods += added * d.Pods
				u.StorageBytes += added * d.StorageBytes
				l.Usage[d.Tier] = u
			}
			return json.Marshal(&l)
		})
		if err != nil {
			return fmt.Errorf("ledger of %s: %w", t.project, err)
		}
	}
	return nil
}

// wiretap counts, until the returned function is called, every message
// the NATS server delivers to a subscription of ">" on nc (the admin's
// connection sees every subject), and then prints the busiest subjects, a
// subject's last token dropped when it names one of many (a key, an
// inbox), in messages a second (ATOLL_REGION_WIRETAP=1): what the idle
// region's traffic is made of.
func wiretap(nc *nats.Conn, what string) func() {
	var (
		mu sync.Mutex
		by = map[string]int{}
	)
	start := time.Now()
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		by[tapClass(m.Subject)]++
		mu.Unlock()
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "wiretap: %v\n", err)
		return func() {}
	}
	_ = sub.SetPendingLimits(-1, -1)
	return func() {
		_ = sub.Unsubscribe()
		d := time.Since(start).Seconds()
		mu.Lock()
		defer mu.Unlock()
		keys := slices.SortedFunc(maps.Keys(by), func(a, b string) int { return by[b] - by[a] })
		total := 0
		for _, k := range keys {
			total += by[k]
		}
		fmt.Printf("regionscale: %s, %.1f messages/s in all; busiest subjects:\n", what, float64(total)/d)
		for _, k := range keys[:min(25, len(keys))] {
			fmt.Printf("  %8.2f/s  %s\n", float64(by[k])/d, k)
		}
	}
}

// tapClass is the class of a subject the wiretap counts by: its first
// tokens, up to a token that names one of many.
func tapClass(subject string) string {
	toks := strings.Split(subject, ".")
	switch {
	case toks[0] == "_INBOX":
		return "_INBOX"
	case toks[0] == "$KV" && len(toks) > 2:
		return "$KV." + toks[1] + "." + keyClass(toks[2:])
	case toks[0] == "$JS" && len(toks) > 3 && toks[1] == "API":
		return strings.Join(toks[:min(len(toks), 4)], ".")
	case toks[0] == "$JS" && len(toks) > 2:
		return strings.Join(toks[:3], ".")
	}
	return strings.Join(toks[:min(len(toks), 2)], ".")
}

// keyClass is a key's class: its first token, followed by ".*" when
// more tokens follow (a project's workloads, a group's presence records).
func keyClass(toks []string) string {
	if len(toks) >= 2 {
		return toks[0] + ".*"
	}
	return toks[0]
}

// duplicateWindow is the events stream's duplicate window.
func duplicateWindow() time.Duration {
	for _, c := range bus.DefaultTopology(1).Streams {
		if c.Name == bus.StreamEvents {
			return c.Duplicates
		}
	}
	return 0
}

// linkRevisions sets each event's revOf: the record whose revision its
// idempotency key names, the workload's when records of several buckets
// have that revision (each bucket counts its own).
func linkRevisions(records []record) {
	for i, r := range records {
		if r.bucket != "" {
			continue
		}
		_, rev, ok := bus.ParseMsgID(r.header.Get(jetstream.MsgIDHeader))
		if !ok {
			continue
		}
		for j, o := range records {
			if o.bucket != "" && o.rev == rev && (records[i].revOf < 0 || o.bucket == bus.BucketWorkloads) {
				records[i].revOf = j
			}
		}
	}
}

// ownRevision rewrites an event's idempotency key (Nats-Msg-Id,
// bus.MsgID: the key and the revision that produced the event) to name
// the copy's revision where the template's named the revision of one of
// the template's own records (r.revOf): the copy's record of the same
// key, whose revision is its write's stream sequence (acks, by record;
// the records come before the events; seqs holds the sequences received,
// 0 for none yet). The services compare that revision with the records they
// read (events.Publisher.Published: the event at the workload's revision
// or later), so a copy whose events named the template's revisions would
// look unannounced to them, and admission's repair would publish every
// seeded App's admitted event again (spread over its first pass, so within
// the idle window): work a region of real submissions never has.
func ownRevision(ctx context.Context, h nats.Header, r record, acks []jetstream.PubAckFuture, seqs []uint64) error {
	key, _, ok := bus.ParseMsgID(h.Get(jetstream.MsgIDHeader))
	if !ok || r.revOf < 0 {
		return nil
	}
	if seqs[r.revOf] == 0 {
		ack, err := acked(ctx, acks[r.revOf])
		if err != nil {
			return err
		}
		seqs[r.revOf] = ack.Sequence
	}
	h.Set(jetstream.MsgIDHeader, bus.MsgID(key, seqs[r.revOf]))
	return nil
}

// acked waits for f's acknowledgement. A future delivers it once on its
// channel, and several events may name the same record: once delivered,
// the future's Ok channel is empty, so a later call must not wait on it.
func acked(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// serviceStart is one service's start at one size.
type serviceStart struct {
	cold, restart time.Duration // process start -> /readyz 200
	// filled: process start -> atoll_caches_filled 1 after the SIGKILL,
	// for a service whose caches fill behind its readiness (0: it has no
	// such gauge, its caches fill before it is ready).
	filled    time.Duration
	rss, heap uint64 // once quiet after the restart
}

// regionResult is everything measured at one size.
type regionResult struct {
	size     int
	seeded   time.Duration // writing the copies
	starts   map[string]serviceStart
	idleCPU  float64 // percent of a core, services and nats-server
	idleBy   string
	quiet    bool          // the region was quiet before the idle window
	settled  time.Duration // from the services' start to quiet (or the cap)
	measured sizeResult
}

// rss reads a process's resident set size from /proc.
func rss(pid int) uint64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// settle waits, up to limit, until the region's CPU use over
// quietWindow is within quietMargin of idle.
func settle(ctx context.Context, idle float64, limit time.Duration) (bool, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		c, err := cpuOver(ctx, quietWindow)
		if err != nil {
			return false, err
		}
		if c <= idle+quietMargin {
			return true, nil
		}
	}
	return false, nil
}

// serviceCPU is the region's services' and NATS server's CPU use between
// u0 and u1 over d, in percent of a core, without this process.
func serviceCPU(u0, u1 usage, d time.Duration) float64 {
	var sum time.Duration
	for name, c := range u1.cpuBy {
		if name != "bench" {
			sum += c - u0.cpuBy[name]
		}
	}
	return 100 * float64(sum) / float64(d)
}

// BenchmarkRegionScale measures, at each region size, every service's
// time from process start to /readyz, its memory per workload, the idle
// region's CPU and the submit -> propagated P99 (see the top of this
// file).
func BenchmarkRegionScale(b *testing.B) {
	if testing.Short() {
		b.Skip("needs member clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	log := benchLogger()
	dir := os.Getenv("ATOLL_REGION_DIR") // kept after the run, with the processes' logs
	if dir == "" {
		dir = b.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	opts := region.Options{Dir: dir, Nodes: scaleNodes, Logger: log,
		ClusterNice: scaleClusterNice, ClusterBackgroundNice: scaleBackgroundNice,
		Exec: b.TempDir(), ExecLogLevel: os.Getenv("ATOLL_BENCH_LOG"), ExecEnv: scaleProcessEnv}
	if err := region.BuildServices(ctx, opts.Exec); err != nil {
		b.Fatal(err)
	}
	natsBin, err := region.BuildNATSServer(ctx, opts.Exec)
	if err != nil {
		b.Fatal(err)
	}
	opts.NATSExec = natsBin
	reg, err := region.Start(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Stop(context.Background())
	regionUsage, processes = usageOf(b, reg), reg
	defer func() { regionUsage, processes = selfUsage, nil }()
	cl, gw := regionClient(b, reg)
	defer gw.Close()
	admin := bus.NewRequester(gw.NC, bus.RequestPolicy{})

	projects := make([]string, regionProjects)
	for i := range projects {
		projects[i] = regionProject(i)
	}
	lim := api.Limit{MilliCPU: new(int64(1 << 40)), MemoryBytes: new(int64(1 << 60)), Pods: new(int64(1 << 30))}
	for _, p := range append(slices.Clone(projects), regionMeasureProject) {
		if err := cl.SetQuota(ctx, p, api.TierOnDemand, lim); err != nil {
			b.Fatal(err)
		}
	}
	events := newEventLog()
	if err := events.watchStatus(ctx, reg.Bus, regionMeasureProject); err != nil {
		b.Fatal(err)
	}
	sub, err := reg.Bus.NC.Subscribe(bus.EventSubject(regionMeasureProject, api.KindApp, "*", "*"), events.observe)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}

	// The templates and the small running Apps, through admission.
	t0 := time.Now()
	if err := submitAll(ctx, cl, projects, regionRunning); err != nil {
		b.Fatal(err)
	}
	if err := waitStatuses(ctx, reg.Bus, projects, regionRunning); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("regionscale: %d templates and %d small Apps submitted and settled in %v\n", len(projects), regionRunning, time.Since(t0).Round(100*time.Millisecond))
	tpls := make([]template, len(projects))
	for i, p := range projects {
		if tpls[i], err = readTemplate(ctx, reg.Bus, p); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Printf("regionscale: each template's records, copied per seeded App: %s\n", tpls[0].describe())

	// Warm the measured path (the measured project's namespace in the
	// clusters) outside the clock.
	if w := measure(ctx, b, reg, cl, admin, events, side{regionMeasureProject, 0, warmSubmissions, "w"})[0]; w.errs+w.lost+w.cleanupErrs > 0 {
		b.Fatalf("warm-up round: %d failed, %d lost, %d deletions failed; first error: %v", w.errs, w.lost, w.cleanupErrs, w.firstErr)
	}

	// The region's idle CPU use with its clusters settled, what quiet is
	// measured against: the lowest of a few windows.
	idle := 100.0
	for range 3 {
		c, err := cpuOver(ctx, quietWindow)
		if err != nil {
			b.Fatal(err)
		}
		idle = min(idle, c)
	}

	b.ResetTimer()
	sizes := append([]int{regionBase}, regionSizes...)
	var results []regionResult
	// Each project holds its template and, in all, regionRunning small
	// Apps; the seeded copies make up the rest of each size.
	have := 0 // seeded per project
	for _, size := range sizes {
		per := max(0, (size-regionRunning)/regionProjects-1)
		res, err := measureRegion(ctx, b, reg, cl, admin, events, tpls, idle, size, have, per)
		results = append(results, res)
		if err != nil {
			printRegion(results)
			b.Fatal(err)
		}
		have = max(have, per)
	}
	b.StopTimer()
	printRegion(results)
	for _, r := range results {
		if m := r.measured; m.errs+m.lost+m.cleanupErrs > 0 {
			b.Errorf("at %d: %d submissions failed, %d never propagated, %d deletions failed; first error: %v", r.size, m.errs, m.lost, m.cleanupErrs, m.firstErr)
		}
	}
	last := results[len(results)-1]
	b.ReportMetric(ratio(percentile(last.measured.prop, .99), percentile(results[0].measured.prop, .99)), "propagated-p99-ratio")
	b.ReportMetric(last.idleCPU, "idle-cpu-%")
	var slowest time.Duration
	for _, s := range last.starts {
		slowest = max(slowest, s.restart)
	}
	b.ReportMetric(slowest.Seconds(), "slowest-ready-s")
}

// submitAll submits each project's template and n small Apps spread over
// the projects, 8 at a time.
func submitAll(ctx context.Context, cl *busclient.Client, projects []string, n int) error {
	docs := make([][]byte, 0, len(projects)+n)
	for _, p := range projects {
		docs = append(docs, zeroDoc(p, regionTemplate))
	}
	for i := range n {
		docs = append(docs, smallDoc(projects[i%len(projects)], fmt.Sprintf("small-%04d", i)))
	}
	next := make(chan []byte)
	errs := make(chan error, len(docs))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for d := range next {
				if _, err := cl.Submit(ctx, d); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, d := range docs {
		next <- d
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

// waitStatuses waits until every template is Running and n small Apps'
// statuses are Running: through the whole pipeline.
func waitStatuses(ctx context.Context, b *bus.Bus, projects []string, n int) error {
	kv, err := b.KV(ctx, bus.BucketStatus)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, p := range projects {
		want[api.Key(p, api.KindApp, regionTemplate)] = true
	}
	for i := range n {
		want[api.Key(projects[i%len(projects)], api.KindApp, fmt.Sprintf("small-%04d", i))] = true
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for {
		for k := range want {
			e, err := kv.Get(wctx, k)
			if err != nil {
				continue
			}
			var st api.Status
			if json.Unmarshal(e.Value(), &st) == nil && st.Phase == api.PhaseRunning {
				delete(want, k)
			}
		}
		if len(want) == 0 {
			// Events trail the status by at most a fold.
			time.Sleep(2 * time.Second)
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%d Apps not Running: %w", len(want), wctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// measureRegion brings the region to size (seeding copies have..per-1 of
// each project's template with the services stopped) and measures it.
func measureRegion(ctx context.Context, b *testing.B, reg *region.Region, cl *busclient.Client, admin *bus.Requester, events *eventLog,
	tpls []template, idle float64, size, have, per int) (regionResult, error) {
	res := regionResult{size: size, starts: map[string]serviceStart{}}
	// 1. Stop, seed, start cold.
	for i := len(region.Services) - 1; i >= 0; i-- {
		if err := reg.StopService(ctx, region.Services[i].Name); err != nil {
			return res, err
		}
	}
	t0 := time.Now()
	if err := seedRegion(ctx, reg.Bus, tpls, have, per); err != nil {
		return res, err
	}
	res.seeded = time.Since(t0)
	for _, s := range region.Services {
		t := time.Now()
		if err := reg.StartReplica(ctx, s.Name, 0); err != nil {
			return res, err
		}
		res.starts[s.Name] = serviceStart{cold: time.Since(t)}
	}
	fmt.Printf("regionscale: at %d, %d copies written in %v; services started\n", size, (per-have)*len(tpls), res.seeded.Round(100*time.Millisecond))
	// 2. The idle region, once quiet (or seedSettle after the start): the
	// copies' objects are not in the member clusters yet, so the
	// propagator creates them (and the aggregator observes them) first.
	var err error
	t1 := time.Now()
	if res.quiet, err = settle(ctx, idle, seedSettle((per-have)*len(tpls))); err != nil {
		return res, err
	}
	res.settled = time.Since(t1)
	fmt.Printf("regionscale: at %d, quiet %v after the start: %v\n", size, res.quiet, res.settled.Round(time.Second))
	// The seeded events' idempotency keys are held by the server for the
	// stream's duplicate window and then expired, a burst of work a region
	// whose last submission is that old no longer has: the idle window
	// starts after it.
	if wait := time.Until(t0.Add(res.seeded + duplicateWindow())); wait > 0 {
		fmt.Printf("regionscale: at %d, waiting %v for the seed's duplicate window to pass\n", size, wait.Round(time.Second))
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(wait):
		}
	}
	u0, w0 := regionUsage(), time.Now()
	profiled := func() {}
	if dir := os.Getenv("ATOLL_BENCH_SCALE_PROFILE"); dir != "" {
		// CPU profiles of the idle window (scale_test.go's profileProcesses;
		// the services serve them with
		// ATOLL_BENCH_SCALE_PROCESS_ENV=ATOLL_PROFILING=true).
		profiled = profileProcesses(reg, dir, fmt.Sprintf("region-idle%d", size), regionIdle-time.Second)
	}
	tapped := func() {}
	if os.Getenv("ATOLL_REGION_WIRETAP") != "" {
		tapped = wiretap(reg.Bus.NC, fmt.Sprintf("at %d, idle", size))
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(regionIdle):
	}
	profiled()
	tapped()
	u1 := regionUsage()
	res.idleCPU, res.idleBy = serviceCPU(u0, u1, time.Since(w0)), busiest(u0, u1, time.Since(w0), len(u1.cpuBy))
	// Quiet from here on is measured against this size's own idle use,
	// when that is higher: its periodic work is not a backlog.
	idle = max(idle, 100*float64(u1.cpu-u0.cpu)/float64(time.Since(w0)))
	// 3. Each service killed and started again.
	for _, s := range region.Services {
		if err := reg.Kill(s.Name, 0); err != nil {
			return res, err
		}
		t := time.Now()
		if err := reg.StartReplica(ctx, s.Name, 0); err != nil {
			return res, err
		}
		st := res.starts[s.Name]
		st.restart = time.Since(t)
		if ok, err := waitFilled(ctx, reg.AdminURL(s.Name, 0)); err != nil {
			return res, fmt.Errorf("%s: %w", s.Name, err)
		} else if ok {
			st.filled = time.Since(t)
		}
		if _, err := settle(ctx, idle, settleCap); err != nil {
			return res, err
		}
		ps, err := reg.Usage(ctx)
		if err != nil {
			return res, err
		}
		for _, p := range ps {
			if p.Replica.Service == s.Name {
				st.rss, st.heap = rss(p.PID), p.HeapBytes
			}
		}
		res.starts[s.Name] = st
		fmt.Printf("regionscale: at %d, %s ready %v after its start (cold %v), RSS %d MB\n", size, s.Name,
			st.restart.Round(10*time.Millisecond), st.cold.Round(10*time.Millisecond), st.rss>>20)
	}
	// 4. Submissions into a project of its own.
	var rounds []sizeResult
	for r := range regionRounds {
		if _, err := settle(ctx, idle, settleCap); err != nil {
			return res, err
		}
		rounds = append(rounds, measure(ctx, b, reg, cl, admin, events,
			side{regionMeasureProject, size, regionSubmissions, fmt.Sprintf("r%d-", r)})[0])
	}
	res.measured = pool(rounds)
	return res, nil
}

// waitFilled polls a process's /metrics until its atoll_caches_filled
// gauge is 1 (true) or it has none (false, at the first answer).
func waitFilled(ctx context.Context, adminURL string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(region.ReadyPoll)
	defer tick.Stop()
	for {
		if mfs, err := admin.ScrapeFamilies(ctx, adminURL); err == nil {
			mf, ok := mfs["atoll_caches_filled"]
			if !ok {
				return false, nil
			}
			if ms := mf.GetMetric(); len(ms) > 0 && ms[0].GetGauge().GetValue() == 1 {
				return true, nil
			}
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("caches not filled: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// printRegion prints the table: per service, its start and memory at each
// size and the ratios; the idle CPU; the P99s.
func printRegion(results []regionResult) {
	if len(results) == 0 {
		return
	}
	fmt.Printf("\nregionscale: a region of N workloads over %d projects (Apps at 0 replicas, seeded as copies of a submitted one, and %d Apps of one pod), %d clusters x %d nodes\n",
		regionProjects, regionRunning, 3, scaleNodes)
	// The readiness baseline: the first of regionSizes, when measured and
	// smaller than the last (ATOLL_REGION_WORKLOADS=100000 alone measures
	// no baseline: the ratio is not printed, nor judged).
	ref := -1
	for i, r := range results {
		if r.size == regionSizes[0] && i < len(results)-1 {
			ref = i
		}
	}
	against := "no ratio (one size of ATOLL_REGION_WORKLOADS)"
	if ref >= 0 {
		against = fmt.Sprintf("ratio to %d", results[ref].size)
	}
	fmt.Printf("  process start -> /readyz 200 after SIGKILL (cold: after a clean stop of every service), RSS once quiet; %s; target <= %v and <= %.1fx (met/poll: beyond the ratio by less than the %v poll of /readyz)\n",
		against, readyTarget, readyRatioTarget, region.ReadyPoll)
	fmt.Printf("  %-12s", "service")
	for _, r := range results {
		fmt.Printf(" %26s", fmt.Sprintf("@%d ready/cold/RSS", r.size))
	}
	fmt.Printf(" %8s %8s %14s\n", "ratio", "target", "B/workload")
	for _, s := range region.Services {
		fmt.Printf("  %-12s", s.Name)
		for _, r := range results {
			st := r.starts[s.Name]
			fmt.Printf(" %26s", fmt.Sprintf("%.2fs/%.2fs/%dMB", st.restart.Seconds(), st.cold.Seconds(), st.rss>>20))
		}
		last := results[len(results)-1]
		x := math.NaN()
		if ref >= 0 {
			x = ratio(last.starts[s.Name].restart, results[ref].starts[s.Name].restart)
		}
		verdict, xs := "met", fmt.Sprintf("%.2fx", x)
		// A start is measured to one poll of /readyz (region.ReadyPoll):
		// 0.05 s against 0.10 s is one poll, not twice the time.
		withinPoll := ref >= 0 && last.starts[s.Name].restart-time.Duration(readyRatioTarget*float64(results[ref].starts[s.Name].restart)) <= region.ReadyPoll
		switch {
		case last.starts[s.Name].restart == 0:
			verdict = "-" // not measured: the size failed before it
		case last.starts[s.Name].restart > readyTarget || last.starts[s.Name].cold > readyTarget || (x > readyRatioTarget && !withinPoll):
			verdict = "NOT met"
		case x > readyRatioTarget:
			verdict = "met/poll" // beyond the ratio by less than one poll
		case math.IsNaN(x):
			verdict, xs = fmt.Sprint(readyTarget)+" met", "-" // the ratio is not measured in this run
		}
		// Memory per workload: what the service holds beyond the smallest
		// size, per workload added.
		per := "-"
		if d := last.size - results[0].size; d > 0 && last.starts[s.Name].rss > 0 {
			per = fmt.Sprintf("%.0f", (float64(last.starts[s.Name].rss)-float64(results[0].starts[s.Name].rss))/float64(d))
		}
		fmt.Printf(" %8s %8s %14s\n", xs, verdict, per)
	}
	fmt.Printf("\n  process start -> atoll_caches_filled 1 after SIGKILL (ready before: their caches fill behind /readyz, and they take no lease until filled):\n")
	for _, s := range region.Services {
		if last := results[len(results)-1]; last.starts[s.Name].filled == 0 {
			continue
		}
		fmt.Printf("  %-12s", s.Name)
		for _, r := range results {
			fmt.Printf(" %26s", fmt.Sprintf("@%d %.2fs", r.size, r.starts[s.Name].filled.Seconds()))
		}
		if ref >= 0 {
			fmt.Printf(" %8.2fx", ratio(results[len(results)-1].starts[s.Name].filled, results[ref].starts[s.Name].filled))
		}
		fmt.Println()
	}
	fmt.Printf("\n  idle region (services and nats-server, nothing submitted, over %v; target <= %.0f%% of a core):\n", regionIdle, idleTarget)
	for _, r := range results {
		verdict := "met"
		if r.idleCPU > idleTarget {
			verdict = "NOT met"
		}
		q := " (quiet " + r.settled.Round(time.Second).String() + " after the start)"
		if !r.quiet {
			q = " (not quiet within " + r.settled.Round(time.Second).String() + " of the start)"
		}
		fmt.Printf("  %8d %6.1f%% %8s  by process: %s%s\n", r.size, r.idleCPU, verdict, r.idleBy, q)
	}
	var measured []sizeResult
	for _, r := range results {
		if r.measured.submissions > 0 {
			measured = append(measured, r.measured)
		}
	}
	printResults(fmt.Sprintf("submissions into project %q (holding nothing else) at each region size, %d rounds of %d; ratios to the region at %d, measured before it in the same run (not interleaved: see the file comment)",
		regionMeasureProject, regionRounds, regionSubmissions, results[0].size), measured, false)
	for _, r := range measured {
		var p99s []string
		for _, round := range r.propBy {
			p99s = append(p99s, ms2(percentile(round, .99)))
		}
		fmt.Printf("  %8d propagated P99 per round: %s\n", r.size, strings.Join(p99s, " "))
	}
}

// ms2 formats d in milliseconds.
func ms2(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d.Microseconds())/1000) }
