package cli

// The canary is a user of the Compute API that never stops checking it:
// each round walks one small App through its whole life, exactly as a
// person with a developer token would, and times every step.
//
//	create        a new App (a name of its own per round), one replica per zone
//	wait-running  phase Running, every replica ready, a ready replica in every zone
//	scale         one replica more, and again until all are ready
//	logs          a few log lines from every cluster that runs a ready replica
//	events        admitted, scheduled, propagated, running and scaled are listed
//	delete        the App, and until the gateway answers 404 for it
//
// A round stops at its first failing step, which it names; the App of a
// failed round is deleted, best effort. Each step has its own deadline
// (--timeout), so a hung step fails the round instead of stalling the
// canary; conditions that take a while (ready replicas, events, logs) are
// polled within that deadline, and the step's error says what was last
// seen.
//
// Zones: the App is spread over the zones the canary checks and must have
// a ready replica in each, since a platform that fails over quietly would
// otherwise hide a frozen member cluster from a user's point of view. The
// zones are --zones, else those of the region's uncordoned clusters when
// the caller may list clusters (platform admins), asked again every round;
// for anyone else without --zones, only ready == desired is checked.
//
// Reporting: one summary line per round (or a JSON object with -o json),
// a success ratio and per-step latencies at the end, and with
// --metrics-listen Prometheus metrics of the canary on a registry of its
// own: a latency histogram per step (successful steps only: a failed
// step's time is mostly its deadline), step and round counters by outcome,
// and the last round's outcome and time for alerting. With --rounds N the
// command exits 1 unless all N rounds ran and passed; without it, it runs
// until interrupted.

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// The canary's steps, in the order a round runs them.
const (
	stepCreate      = "create"
	stepWaitRunning = "wait-running"
	stepScale       = "scale"
	stepLogs        = "logs"
	stepEvents      = "events"
	stepDelete      = "delete"
)

var canarySteps = []string{stepCreate, stepWaitRunning, stepScale, stepLogs, stepEvents, stepDelete}

// canaryEvents are the events a round's App must have by its events step.
// The platform events and the phase the canary waits for (libs/api).
const (
	eventAdmitted   = "admitted"
	eventScheduled  = "scheduled"
	eventPropagated = "propagated"
	eventRunning    = "running"
	eventScaled     = "scaled"
	phaseRunning    = "Running"
)

var canaryEvents = []string{eventAdmitted, eventScheduled, eventPropagated, eventRunning, eventScaled}

// canaryLabel marks the canary's Apps.
const canaryLabel = "atoll-canary"

// Polling of eventual conditions within a step: from pollFloor, doubling up
// to pollCeiling.
const (
	pollFloor   = 100 * time.Millisecond
	pollCeiling = time.Second
)

// namePrefixRe is what --name-prefix may be: the start of a DNS label.
var namePrefixRe = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// canaryOptions are the canary command's settings.
type canaryOptions struct {
	rounds        int           // rounds to run; 0 runs until interrupted
	interval      time.Duration // from the start of one round to the next
	stepTimeout   time.Duration // deadline of each step
	namePrefix    string        // start of every App's name
	zones         []string      // zones to check; empty: discover
	image         string        // the App's container image
	metricsListen string        // address of /metrics; empty for none
}

func (o canaryOptions) validate() error {
	switch {
	case o.rounds < 0:
		return fmt.Errorf("--rounds %d: want 0 (forever) or more", o.rounds)
	case o.interval < 0:
		return fmt.Errorf("--interval %v: want 0 or more", o.interval)
	case o.stepTimeout <= 0:
		return fmt.Errorf("--timeout %v: want more than 0", o.stepTimeout)
	case len(o.namePrefix) > 40 || !namePrefixRe.MatchString(o.namePrefix):
		return fmt.Errorf("--name-prefix %q: want at most 40 lower case letters, digits and '-', starting with a letter", o.namePrefix)
	case o.image == "":
		return errors.New("--image: want an image")
	}
	for _, z := range o.zones {
		if z == "" {
			return errors.New("--zones: an empty zone name")
		}
	}
	return nil
}

func canaryCmd(g *globals) *cobra.Command {
	o := canaryOptions{}
	cmd := &cobra.Command{
		Use:   "canary [--rounds N] [--interval D] [--zones a,b,c]",
		Short: "Check a region end to end as a user: create, wait Running, scale, logs, events, delete",
		Long: `canary runs rounds, forever or --rounds N times, each walking one small App
through its life as a user would: create it, wait until it is Running with
a ready replica in every zone, scale it by one, read its logs, list its
events, delete it. Each step has its own deadline (--timeout); a round stops
at the first step that fails and names it, and deletes its App.

It prints one line per round with every step's latency (-o json: one JSON
object per round) and, at the end, the share of rounds that passed. With
--metrics-listen it serves Prometheus metrics of its own on /metrics: a
latency histogram per step, steps and rounds by outcome, the last round's
outcome and time.

The zones checked are --zones, else those of the region's uncordoned
clusters when the token may list them (platform admins); otherwise only
ready == desired is checked. With --rounds it exits 1 unless every round
passed.`,
		Example: `  atoll canary --rounds 3 -p canary
  atoll canary -p canary --interval 1m --zones a,b,c --metrics-listen :9464`,
		Args: cobra.NoArgs,
		RunE: g.run(true, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			o.stepTimeout = g.timeout
			if err := o.validate(); err != nil {
				return err
			}
			project, err := t.needProject()
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)).With("component", "atoll-canary")
			k := newCanary(c, project, o, cmd.OutOrStdout(), g.output, log)
			if o.metricsListen != "" {
				_, stop, err := k.serveMetrics(cmd.Context(), o.metricsListen)
				if err != nil {
					return err
				}
				defer stop()
			}
			return k.run(ctx)
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.rounds, "rounds", 0, "rounds to run, then exit 1 if any failed (0: until interrupted)")
	f.DurationVar(&o.interval, "interval", 10*time.Second, "from the start of one round to the start of the next")
	f.StringVar(&o.namePrefix, "name-prefix", "canary", "start of the Apps' names (a random run id and the round follow)")
	f.StringSliceVar(&o.zones, "zones", nil, "zones that must each run a ready replica (default: every uncordoned cluster's zone, for platform admins)")
	f.StringVar(&o.image, "image", "busybox:1.37", "the App's image; it runs sh, logging one line and then sleeping")
	f.StringVar(&o.metricsListen, "metrics-listen", "", "serve the canary's Prometheus metrics on this address's /metrics (host:port)")
	return cmd
}

// canary runs rounds against one gateway and project.
type canary struct {
	c       *sdk.Client
	project string
	o       canaryOptions
	out     io.Writer
	format  string // table, json or yaml
	log     *slog.Logger
	runID   string // random, so two canaries on one project never share a name
	m       *canaryMetrics

	discover  bool     // whether zones are asked of the gateway each round
	lastZones []string // the last discovered zones
}

func newCanary(c *sdk.Client, project string, o canaryOptions, out io.Writer, format string, log *slog.Logger) *canary {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return &canary{c: c, project: project, o: o, out: out, format: format, log: log,
		runID: hex.EncodeToString(b[:]), m: newCanaryMetrics(), discover: len(o.zones) == 0}
}

// stepResult is one step of a round.
type stepResult struct {
	Step    string  `json:"step"`
	Seconds float64 `json:"seconds"`
	OK      bool    `json:"ok"`
}

// roundResult is what a round did.
type roundResult struct {
	Round       int          `json:"round"`
	App         string       `json:"app"`
	Zones       []string     `json:"zones,omitempty"`
	OK          bool         `json:"ok"`
	FailedStep  string       `json:"failedStep,omitempty"`
	Error       string       `json:"error,omitempty"`
	Cleanup     string       `json:"cleanup,omitempty"` // the failed round's App: deleted, or why not
	Interrupted bool         `json:"interrupted,omitempty"`
	Steps       []stepResult `json:"steps"`
	Seconds     float64      `json:"seconds"`
}

// canarySummary is the end of a run.
type canarySummary struct {
	Rounds int                    `json:"rounds"`
	OK     int                    `json:"ok"`
	Ratio  float64                `json:"ratio"`
	Steps  map[string]stepSummary `json:"steps"`
}

// stepSummary is one step over a run: how often it passed and how long it
// took when it did.
type stepSummary struct {
	OK      int       `json:"ok"`
	Failed  int       `json:"failed"`
	P50     float64   `json:"p50Seconds"`
	Max     float64   `json:"maxSeconds"`
	okTimes []float64 // the latencies of the successful runs
}

// run runs the rounds, prints them and the summary, and says whether the
// run passed.
func (k *canary) run(ctx context.Context) error {
	sum := canarySummary{Steps: map[string]stepSummary{}}
	interrupted := false
	for n := 1; k.o.rounds == 0 || n <= k.o.rounds; n++ {
		start := time.Now()
		r := k.round(ctx, n)
		k.print(r)
		if r.Interrupted {
			interrupted = true
			break
		}
		sum.add(r)
		if n == k.o.rounds {
			break
		}
		wait := time.NewTimer(k.o.interval - time.Since(start))
		select {
		case <-ctx.Done():
			interrupted = true
		case <-wait.C:
		}
		wait.Stop()
		if interrupted {
			break
		}
	}
	sum.finish()
	k.printSummary(sum)
	if k.o.rounds > 0 && (interrupted || sum.OK < sum.Rounds) {
		return &ExitError{Code: 1}
	}
	return nil
}

// appName is round n's App: prefix, run id, round.
func (k *canary) appName(n int) string {
	return fmt.Sprintf("%s-%s-%d", k.o.namePrefix, k.runID, n)
}

// round runs one round: every step until one fails, then the cleanup.
func (k *canary) round(ctx context.Context, n int) roundResult {
	start := time.Now()
	name := k.appName(n)
	zones := k.zones(ctx)
	r := roundResult{Round: n, App: name, Zones: zones}
	replicas := max(int32(len(zones)), 2)
	var (
		attempted, deleted bool
		gen                int64
		running            *computeapi.Workload
	)
	steps := []struct {
		name string
		fn   func(ctx context.Context) error
	}{
		{stepCreate, func(ctx context.Context) error {
			attempted = true
			w, err := k.c.CreateWorkload(ctx, k.project, k.document(name, replicas, zones), "")
			if err != nil {
				return err
			}
			gen = w.Metadata.Generation
			return nil
		}},
		{stepWaitRunning, func(ctx context.Context) (err error) {
			running, err = k.waitReady(ctx, name, replicas, gen, zones)
			return err
		}},
		{stepScale, func(ctx context.Context) (err error) {
			w, err := k.c.Scale(ctx, k.project, kindApp, name, replicas+1)
			if err != nil {
				return err
			}
			running, err = k.waitReady(ctx, name, replicas+1, w.Metadata.Generation, zones)
			return err
		}},
		{stepLogs, func(ctx context.Context) error { return k.checkLogs(ctx, name, running) }},
		{stepEvents, func(ctx context.Context) error { return k.checkEvents(ctx, name) }},
		{stepDelete, func(ctx context.Context) error {
			if err := k.deleteAndWait(ctx, name); err != nil {
				return err
			}
			deleted = true
			return nil
		}},
	}
	for _, s := range steps {
		if !k.step(ctx, &r, s.name, s.fn) {
			break
		}
	}
	if attempted && !deleted {
		r.Cleanup = k.cleanup(ctx, name)
	}
	r.OK = r.FailedStep == "" && !r.Interrupted
	r.Seconds = time.Since(start).Seconds()
	if !r.Interrupted {
		k.m.observeRound(r)
	}
	return r
}

// step runs one step within its deadline and records it; false stops the
// round.
func (k *canary) step(ctx context.Context, r *roundResult, name string, fn func(context.Context) error) bool {
	sctx, cancel := context.WithTimeout(ctx, k.o.stepTimeout)
	defer cancel()
	start := time.Now()
	err := fn(sctx)
	elapsed := time.Since(start)
	r.Steps = append(r.Steps, stepResult{Step: name, Seconds: elapsed.Seconds(), OK: err == nil})
	switch {
	case err == nil:
		k.m.observeStep(name, elapsed, true)
		return true
	case ctx.Err() != nil:
		r.Interrupted, r.FailedStep, r.Error = true, name, "interrupted"
		return false
	}
	if sctx.Err() != nil {
		err = fmt.Errorf("not done within %v: %w", k.o.stepTimeout, err)
	}
	r.FailedStep, r.Error = name, err.Error()
	k.m.observeStep(name, elapsed, false)
	return false
}

// zones are the zones this round checks.
func (k *canary) zones(ctx context.Context) []string {
	if !k.discover {
		return k.o.zones
	}
	lctx, cancel := context.WithTimeout(ctx, k.o.stepTimeout)
	defer cancel()
	cs, err := k.c.Clusters(lctx)
	switch {
	case sdk.IsForbidden(err):
		k.discover = false
		k.log.Info("zones not checked: the token may not list clusters; pass --zones to check them")
		return nil
	case err != nil:
		if ctx.Err() == nil {
			k.log.Warn("list clusters: keeping the last zones", "zones", k.lastZones, "err", err)
		}
		return k.lastZones
	}
	k.lastZones = zonesOf(cs)
	return k.lastZones
}

// zonesOf returns the zones of the uncordoned clusters, sorted. An
// unhealthy cluster counts: it is what the canary is there to notice.
func zonesOf(cs []computeapi.Cluster) []string {
	var zones []string
	for _, c := range cs {
		if !c.Cordoned && c.Zone != "" && !slices.Contains(zones, c.Zone) {
			zones = append(zones, c.Zone)
		}
	}
	sort.Strings(zones)
	return zones
}

// document is round's App: tiny requests, spread over the zones.
func (k *canary) document(name string, replicas int32, zones []string) computeapi.WorkloadDocument {
	type requests struct {
		CPU    string `json:"cpu"`
		Memory string `json:"memory"`
	}
	type container struct {
		Name      string   `json:"name"`
		Image     string   `json:"image"`
		Command   []string `json:"command"`
		Resources struct {
			Requests requests `json:"requests"`
		} `json:"resources"`
	}
	spec := struct {
		Replicas  int32 `json:"replicas"`
		Placement *struct {
			Zones []string `json:"zones"`
		} `json:"placement,omitempty"`
		Template struct {
			Containers []container `json:"containers"`
		} `json:"template"`
	}{Replicas: replicas}
	if len(zones) > 0 {
		spec.Placement = &struct {
			Zones []string `json:"zones"`
		}{Zones: zones}
	}
	ct := container{Name: "canary", Image: k.o.image,
		Command: []string{"sh", "-c", `echo "atoll canary $HOSTNAME"; while true; do sleep 3600; done`}}
	ct.Resources.Requests = requests{CPU: "10m", Memory: "16Mi"}
	spec.Template.Containers = []container{ct}
	b, _ := json.Marshal(spec) // plain strings and numbers: cannot fail
	return computeapi.WorkloadDocument{
		ApiVersion: "atoll.dev/v1",
		Kind:       computeapi.App,
		Metadata:   computeapi.DocumentMetadata{Name: name, Labels: map[string]string{canaryLabel: k.runID}},
		Spec:       b,
	}
}

// pollError is a condition that did not hold before the context ended.
type pollError struct {
	ctxErr error // why the context ended
	last   error // the condition's last answer
}

func (e *pollError) Error() string   { return "last seen: " + e.last.Error() }
func (e *pollError) Unwrap() []error { return []error{e.ctxErr, e.last} }

// poll calls check until it returns nil or ctx ends; then the error names
// the last thing check saw.
func poll(ctx context.Context, check func(ctx context.Context) error) error {
	wait := pollFloor
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return &pollError{ctxErr: ctx.Err(), last: err}
		case <-t.C:
		}
		wait = min(2*wait, pollCeiling)
	}
}

// waitReady waits until the App's status, for generation gen or later,
// says Running with want replicas ready and one in every zone.
func (k *canary) waitReady(ctx context.Context, name string, want int32, gen int64, zones []string) (*computeapi.Workload, error) {
	var w *computeapi.Workload
	err := poll(ctx, func(ctx context.Context) error {
		got, err := k.c.Get(ctx, k.project, kindApp, name)
		if err != nil {
			return err
		}
		w = got
		return readiness(got.Status, want, gen, zones)
	})
	return w, err
}

// readiness is nil when st is Running for generation gen or later, with
// want replicas desired and ready, and a ready replica in every zone;
// else it says what falls short.
func readiness(st computeapi.WorkloadStatus, want int32, gen int64, zones []string) error {
	var short []string
	if st.ObservedGeneration < gen {
		short = append(short, fmt.Sprintf("status is of generation %d, want %d", st.ObservedGeneration, gen))
	}
	if st.Phase != phaseRunning {
		short = append(short, "phase "+orDash(st.Phase))
	}
	if st.Desired != want || st.Ready != want {
		short = append(short, fmt.Sprintf("ready %d/%d, want %d/%d", st.Ready, st.Desired, want, want))
	}
	var empty []string
	for _, z := range zones {
		if st.Zones[z].Ready < 1 {
			empty = append(empty, z)
		}
	}
	if len(empty) > 0 {
		short = append(short, fmt.Sprintf("no ready replica in zone %s (zones %s)", strings.Join(empty, ", "), zoneCounts(st.Zones)))
	}
	if len(short) == 0 {
		return nil
	}
	return errors.New(strings.Join(short, "; "))
}

// zoneCounts is "a:1/1 b:2/2", ready over desired per zone.
func zoneCounts(zs map[string]computeapi.Counts) string {
	if len(zs) == 0 {
		return "none"
	}
	names := make([]string, 0, len(zs))
	for z := range zs {
		names = append(names, z)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, z := range names {
		parts[i] = fmt.Sprintf("%s:%d/%d", z, zs[z].Ready, zs[z].Desired)
	}
	return strings.Join(parts, " ")
}

// checkLogs reads the last lines of the App's logs until every cluster
// that runs a ready replica of w has sent one.
func (k *canary) checkLogs(ctx context.Context, name string, w *computeapi.Workload) error {
	var want []string
	if w != nil {
		for c, n := range w.Status.Clusters {
			if n.Ready > 0 {
				want = append(want, c)
			}
		}
	}
	sort.Strings(want)
	return poll(ctx, func(ctx context.Context) error {
		lines := map[string]int{} // cluster -> lines
		err := k.c.Logs(ctx, k.project, kindApp, name, computeapi.StreamLogsParams{Tail: 3}, func(l computeapi.LogLine) error {
			lines[l.Cluster]++
			return nil
		})
		if err != nil {
			return err
		}
		return logCoverage(lines, want)
	})
}

// logCoverage is nil when lines (per cluster) has a line, and one from
// every cluster of want.
func logCoverage(lines map[string]int, want []string) error {
	var missing []string
	for _, c := range want {
		if lines[c] == 0 {
			missing = append(missing, c)
		}
	}
	switch {
	case len(missing) > 0:
		return fmt.Errorf("no log line from cluster %s", strings.Join(missing, ", "))
	case len(lines) == 0:
		return errors.New("no log line")
	}
	return nil
}

// checkEvents lists the App's events until every one of canaryEvents is
// there.
func (k *canary) checkEvents(ctx context.Context, name string) error {
	return poll(ctx, func(ctx context.Context) error {
		evs, err := k.c.ListEvents(ctx, k.project, kindApp, name, 0)
		if err != nil {
			return err
		}
		return eventCoverage(evs, canaryEvents)
	})
}

// eventCoverage is nil when evs has every event of want, else names the
// missing ones.
func eventCoverage(evs []computeapi.Event, want []string) error {
	seen := map[string]bool{}
	for _, e := range evs {
		seen[e.Event] = true
	}
	var missing []string
	for _, e := range want {
		if !seen[e] {
			missing = append(missing, e)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no %s event (of %d)", strings.Join(missing, ", "), len(evs))
	}
	return nil
}

// deleteAndWait deletes the App and waits until the gateway no longer
// has it. A 404 on delete counts: a retried delete may find it gone.
func (k *canary) deleteAndWait(ctx context.Context, name string) error {
	if err := k.c.Delete(ctx, k.project, kindApp, name); err != nil && !sdk.IsNotFound(err) {
		return err
	}
	return poll(ctx, func(ctx context.Context) error {
		_, err := k.c.Get(ctx, k.project, kindApp, name)
		switch {
		case sdk.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return errors.New("still there")
	})
}

// cleanup deletes a failed round's App, best effort (even when the run
// was interrupted), and says how it went.
func (k *canary) cleanup(ctx context.Context, name string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.o.stepTimeout)
	defer cancel()
	err := k.c.Delete(ctx, k.project, kindApp, name)
	switch {
	case err == nil:
		return "deleted"
	case sdk.IsNotFound(err):
		return "not found"
	}
	k.log.Warn("delete a failed round's app", "project", k.project, "app", name, "err", err)
	return "delete failed: " + err.Error()
}

// print writes a round's line, or its JSON object or YAML document.
func (k *canary) print(r roundResult) {
	if k.format != "table" {
		k.printData(r)
		return
	}
	var b strings.Builder
	switch {
	case r.Interrupted:
		fmt.Fprintf(&b, "round %d interrupted step=%s", r.Round, r.FailedStep)
	case r.OK:
		fmt.Fprintf(&b, "round %d ok", r.Round)
	default:
		fmt.Fprintf(&b, "round %d FAILED step=%s", r.Round, r.FailedStep)
	}
	fmt.Fprintf(&b, " app=%s zones=%s", r.App, orDash(strings.Join(r.Zones, ",")))
	for _, s := range r.Steps {
		fmt.Fprintf(&b, " %s=%s", s.Step, seconds(s.Seconds))
	}
	fmt.Fprintf(&b, " total=%s", seconds(r.Seconds))
	if !r.OK && !r.Interrupted {
		fmt.Fprintf(&b, " error=%q", r.Error)
	}
	if r.Cleanup != "" {
		fmt.Fprintf(&b, " cleanup=%q", r.Cleanup)
	}
	fmt.Fprintln(k.out, b.String())
}

// printSummary writes the success ratio and the steps' latencies.
func (k *canary) printSummary(s canarySummary) {
	if k.format != "table" {
		k.printData(s)
		return
	}
	fmt.Fprintf(k.out, "canary: %d/%d rounds ok (%.1f%%)\n", s.OK, s.Rounds, 100*s.Ratio)
	for _, name := range canarySteps {
		st, ok := s.Steps[name]
		if !ok {
			continue
		}
		p50, most := "-", "-"
		if st.OK > 0 {
			p50, most = seconds(st.P50), seconds(st.Max)
		}
		fmt.Fprintf(k.out, "  %-12s ok %d/%d  p50 %s  max %s\n", name, st.OK, st.OK+st.Failed, p50, most)
	}
}

// printData writes v as one line of JSON, or as a YAML document.
func (k *canary) printData(v any) {
	if k.format == "yaml" {
		fmt.Fprintln(k.out, "---")
		_ = printData(k.out, "yaml", v)
		return
	}
	_ = json.NewEncoder(k.out).Encode(v)
}

// seconds formats a latency in milliseconds below 10 s, else to the
// tenth of a second.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d < 10*time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// add counts a finished round.
func (s *canarySummary) add(r roundResult) {
	s.Rounds++
	if r.OK {
		s.OK++
	}
	for _, st := range r.Steps {
		ss := s.Steps[st.Step]
		if st.OK {
			ss.OK++
			ss.okTimes = append(ss.okTimes, st.Seconds)
		} else {
			ss.Failed++
		}
		s.Steps[st.Step] = ss
	}
}

// finish computes the ratio and the percentiles.
func (s *canarySummary) finish() {
	if s.Rounds > 0 {
		s.Ratio = float64(s.OK) / float64(s.Rounds)
	}
	for name, ss := range s.Steps {
		if n := len(ss.okTimes); n > 0 {
			sort.Float64s(ss.okTimes)
			ss.P50, ss.Max = ss.okTimes[(n-1)/2], ss.okTimes[n-1]
		}
		s.Steps[name] = ss
	}
}

// canaryMetrics are the canary's own Prometheus series, written in the
// text exposition format by write (the CLI links no metrics library).
type canaryMetrics struct {
	mu sync.Mutex
	// stepLatency is the histogram of the successful steps' seconds.
	stepLatency map[string]*histogram
	// steps counts steps by step and outcome, rounds rounds by outcome.
	steps  map[[2]string]uint64
	rounds map[string]uint64
	// lastOK is 1 when the last round passed; lastTime when it ended
	// (Unix seconds, 0 before the first).
	lastOK, lastTime float64
}

// latencyBuckets are the upper bounds of the step latency histogram.
var latencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120}

// histogram is one Prometheus histogram series.
type histogram struct {
	counts []uint64 // per bucket of latencyBuckets, not cumulative
	count  uint64
	sum    float64
}

func newCanaryMetrics() *canaryMetrics {
	m := &canaryMetrics{stepLatency: map[string]*histogram{}, steps: map[[2]string]uint64{}, rounds: map[string]uint64{}}
	// Every series exists from the start, so a rate over it is defined.
	for _, s := range canarySteps {
		m.stepLatency[s] = &histogram{counts: make([]uint64, len(latencyBuckets))}
		m.steps[[2]string{s, "success"}] = 0
		m.steps[[2]string{s, "failure"}] = 0
	}
	m.rounds["success"], m.rounds["failure"] = 0, 0
	return m
}

func outcome(ok bool) string {
	if ok {
		return "success"
	}
	return "failure"
}

func (m *canaryMetrics) observeStep(step string, d time.Duration, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.steps[[2]string{step, outcome(ok)}]++
	if !ok {
		return
	}
	h := m.stepLatency[step]
	if h == nil {
		h = &histogram{counts: make([]uint64, len(latencyBuckets))}
		m.stepLatency[step] = h
	}
	v := d.Seconds()
	if i := sort.SearchFloat64s(latencyBuckets, v); i < len(latencyBuckets) {
		h.counts[i]++
	}
	h.count++
	h.sum += v
}

func (m *canaryMetrics) observeRound(r roundResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rounds[outcome(r.OK)]++
	m.lastOK = 0
	if r.OK {
		m.lastOK = 1
	}
	m.lastTime = float64(time.Now().UnixNano()) / 1e9
}

// write writes every series in the Prometheus text exposition format
// (version 0.0.4), families and series in a stable order.
func (m *canaryMetrics) write(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	family := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

	family("atoll_canary_last_round_success", "gauge", "1 when the canary's last round passed, 0 when it failed.")
	fmt.Fprintf(&b, "atoll_canary_last_round_success %s\n", num(m.lastOK))
	family("atoll_canary_last_round_timestamp_seconds", "gauge", "When the canary's last round ended (Unix time).")
	fmt.Fprintf(&b, "atoll_canary_last_round_timestamp_seconds %s\n", num(m.lastTime))

	family("atoll_canary_rounds_total", "counter", "The canary's rounds by outcome (success or failure).")
	for _, o := range slices.Sorted(maps.Keys(m.rounds)) {
		fmt.Fprintf(&b, "atoll_canary_rounds_total{outcome=%q} %d\n", o, m.rounds[o])
	}

	family("atoll_canary_step_duration_seconds", "histogram", "Latency of the canary's successful steps.")
	for _, step := range slices.Sorted(maps.Keys(m.stepLatency)) {
		h := m.stepLatency[step]
		var cum uint64
		for i, le := range latencyBuckets {
			cum += h.counts[i]
			fmt.Fprintf(&b, "atoll_canary_step_duration_seconds_bucket{step=%q,le=%q} %d\n", step, num(le), cum)
		}
		fmt.Fprintf(&b, "atoll_canary_step_duration_seconds_bucket{step=%q,le=\"+Inf\"} %d\n", step, h.count)
		fmt.Fprintf(&b, "atoll_canary_step_duration_seconds_sum{step=%q} %s\n", step, num(h.sum))
		fmt.Fprintf(&b, "atoll_canary_step_duration_seconds_count{step=%q} %d\n", step, h.count)
	}

	family("atoll_canary_steps_total", "counter", "The canary's steps by outcome (success or failure); a round stops at its first failure.")
	keys := slices.SortedFunc(maps.Keys(m.steps), func(a, b [2]string) int {
		return cmp.Or(strings.Compare(a[1], b[1]), strings.Compare(a[0], b[0]))
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "atoll_canary_steps_total{outcome=%q,step=%q} %d\n", k[1], k[0], m.steps[k])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// serveMetrics serves the canary's registry on /metrics at addr until
// stop; bound is the address it listens on.
func (k *canary) serveMetrics(ctx context.Context, addr string) (bound string, stop func(), err error) {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if err := k.m.write(w); err != nil {
			k.log.Debug("write metrics", "err", err)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			k.log.Error("metrics server", "err", err)
		}
	}()
	k.log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
