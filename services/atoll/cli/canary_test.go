package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// canaryGateway plays a region for the canary: an App becomes Running on
// the second read after each change, its replicas divided over the zones
// of its placement that are not down (a platform that fails over quietly),
// and every cluster with a ready replica serves a log line.
type canaryGateway struct {
	down           string // a zone that runs nothing
	forbidClusters bool   // listing clusters answers 403, as for a developer
	// cancel is called when an App whose name ends in cancelOn is scaled.
	cancelOn string
	cancel   context.CancelFunc

	mu      sync.Mutex
	apps    map[string]*canaryApp
	created []computeapi.WorkloadDocument
	deleted []string
}

type canaryApp struct {
	replicas int32
	zones    []string
	gen      int64
	reads    int // since the last change
	events   []string
}

func (f *canaryGateway) status(a *canaryApp) computeapi.WorkloadStatus {
	st := computeapi.WorkloadStatus{Phase: "Pending", ObservedGeneration: a.gen - 1}
	if a.reads < 2 {
		return st
	}
	zones := a.zones
	if len(zones) == 0 {
		zones = []string{"a", "b", "c"}
	}
	var live []string
	for _, z := range zones {
		if z != f.down {
			live = append(live, z)
		}
	}
	st = computeapi.WorkloadStatus{Phase: "Running", ObservedGeneration: a.gen, Desired: a.replicas, Ready: a.replicas,
		Zones: map[string]computeapi.Counts{}, Clusters: map[string]computeapi.Counts{}}
	for i := range a.replicas {
		z := live[int(i)%len(live)]
		c := st.Zones[z]
		c.Desired++
		c.Ready++
		st.Zones[z], st.Clusters["zone-"+z] = c, c
	}
	if !slices.Contains(a.events, "running") {
		a.events = append(a.events, "running")
	}
	return st
}

func (f *canaryGateway) handler(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	app := func(w http.ResponseWriter, r *http.Request) (*canaryApp, bool) {
		if r.PathValue("kind") != "App" {
			t.Errorf("%s %s: kind %q, want App", r.Method, r.URL.Path, r.PathValue("kind"))
		}
		a := f.apps[r.PathValue("name")]
		if a == nil {
			writeJSON(w, 404, computeapi.Error{Code: "NotFound", Message: "no such workload"})
		}
		return a, a != nil
	}
	view := func(name string, a *canaryApp) computeapi.Workload {
		return computeapi.Workload{Kind: "App", Metadata: computeapi.Metadata{Name: name, Generation: a.gen}, Status: f.status(a)}
	}
	mux.HandleFunc("GET /v1/clusters", func(w http.ResponseWriter, r *http.Request) {
		if f.forbidClusters {
			writeJSON(w, 403, computeapi.Error{Code: "Forbidden", Message: "platform admins only"})
			return
		}
		writeJSON(w, 200, computeapi.ClusterList{Items: []computeapi.Cluster{
			{Name: "zone-c", Zone: "c"}, {Name: "zone-a", Zone: "a", Healthy: true}, {Name: "zone-b", Zone: "b", Healthy: true},
			{Name: "zone-b2", Zone: "b", Healthy: true}, {Name: "zone-d", Zone: "d", Healthy: true, Cordoned: true},
		}})
	})
	mux.HandleFunc("POST /v1/projects/demo/workloads", func(w http.ResponseWriter, r *http.Request) {
		var d computeapi.WorkloadDocument
		if err := json.NewDecoder(r.Body).Decode(&d); err != nil {
			t.Errorf("create: %v", err)
		}
		var spec struct {
			Replicas  int32 `json:"replicas"`
			Placement struct {
				Zones []string `json:"zones"`
			} `json:"placement"`
		}
		if err := json.Unmarshal(d.Spec, &spec); err != nil {
			t.Errorf("create: spec: %v", err)
		}
		f.created = append(f.created, d)
		a := &canaryApp{replicas: spec.Replicas, zones: spec.Placement.Zones, gen: 1, events: []string{"admitted", "scheduled", "propagated"}}
		f.apps[d.Metadata.Name] = a
		writeJSON(w, 201, computeapi.Workload{Kind: "App", Metadata: computeapi.Metadata{Name: d.Metadata.Name, Generation: 1}})
	})
	mux.HandleFunc("GET /v1/projects/demo/workloads/{kind}/{name}", func(w http.ResponseWriter, r *http.Request) {
		if a, ok := app(w, r); ok {
			a.reads++
			writeJSON(w, 200, view(r.PathValue("name"), a))
		}
	})
	mux.HandleFunc("POST /v1/projects/demo/workloads/{kind}/{name}/scale", func(w http.ResponseWriter, r *http.Request) {
		a, ok := app(w, r)
		if !ok {
			return
		}
		var req computeapi.ScaleRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("scale: %v", err)
		}
		a.replicas, a.gen, a.reads = req.Replicas, a.gen+1, 0
		a.events = append(a.events, "scaled")
		if f.cancelOn != "" && strings.HasSuffix(r.PathValue("name"), f.cancelOn) {
			f.cancel()
		}
		writeJSON(w, 200, view(r.PathValue("name"), a))
	})
	mux.HandleFunc("GET /v1/projects/demo/workloads/{kind}/{name}/logs", func(w http.ResponseWriter, r *http.Request) {
		a, ok := app(w, r)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		for c, n := range f.status(a).Clusters {
			if n.Ready > 0 {
				_ = enc.Encode(computeapi.LogLine{Cluster: c, Pod: "p", Container: "canary", Line: "atoll canary"})
			}
		}
	})
	mux.HandleFunc("GET /v1/projects/demo/workloads/{kind}/{name}/events", func(w http.ResponseWriter, r *http.Request) {
		a, ok := app(w, r)
		if !ok {
			return
		}
		l := computeapi.EventList{Items: []computeapi.Event{}}
		for i, e := range a.events {
			l.Items = append(l.Items, computeapi.Event{Id: int64(i + 1), Event: e, Kind: "App", Name: r.PathValue("name")})
		}
		writeJSON(w, 200, l)
	})
	mux.HandleFunc("DELETE /v1/projects/demo/workloads/{kind}/{name}", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := app(w, r); ok {
			delete(f.apps, r.PathValue("name"))
			f.deleted = append(f.deleted, r.PathValue("name"))
			w.WriteHeader(http.StatusNoContent)
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
}

func newCanaryGateway(t *testing.T, f *canaryGateway) string {
	f.apps = map[string]*canaryApp{}
	srv := httptest.NewServer(f.handler(t))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runCanaryCLI runs `atoll canary` in process with ctx.
func runCanaryCLI(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := Root()
	root.SetArgs(append([]string{"canary"}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// exitCode is the code err ends the program with (main's rule).
func exitCode(err error) int {
	var e *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Code
	}
	return 1
}

func TestCanaryCommand(t *testing.T) {
	tests := []struct {
		name     string
		down     string // a zone that runs nothing
		forbid   bool   // listing clusters is forbidden
		args     []string
		cancelOn int // cancel the run when this round's App is scaled
		wantCode int
		want     []string // in the output, in order
		// wantReplicas and wantZones are what each create asked for.
		wantReplicas int32
		wantZones    []string
		wantDeleted  int
	}{{
		name:         "two rounds pass over the discovered zones",
		args:         []string{"--rounds", "2"},
		want:         []string{"round 1 ok", "zones=a,b,c create=", " wait-running=", " scale=", " logs=", " events=", " delete=", "round 2 ok", "canary: 2/2 rounds ok (100.0%)", "wait-running ok 2/2"},
		wantReplicas: 3, wantZones: []string{"a", "b", "c"}, wantDeleted: 2,
	}, {
		name:     "a zone that runs nothing fails wait-running, and the App is deleted",
		down:     "c",
		args:     []string{"--rounds", "1", "--timeout", "1s"},
		wantCode: 1,
		want: []string{`round 1 FAILED step=wait-running app=probe-`, ` zones=a,b,c create=`, `error="not done within 1s: last seen: no ready replica in zone c (zones a:2/2 b:1/1)"`,
			`cleanup="deleted"`, "canary: 0/1 rounds ok (0.0%)", "create       ok 1/1", "wait-running ok 0/1  p50 -  max -"},
		wantReplicas: 3, wantZones: []string{"a", "b", "c"}, wantDeleted: 1,
	}, {
		name:         "--zones: only those are checked",
		down:         "c",
		args:         []string{"--rounds", "1", "--zones", "a,b"},
		want:         []string{"round 1 ok", "zones=a,b ", "canary: 1/1 rounds ok"},
		wantReplicas: 2, wantZones: []string{"a", "b"}, wantDeleted: 1,
	}, {
		name:         "a developer cannot list clusters: zones are not checked",
		down:         "c",
		forbid:       true,
		args:         []string{"--rounds", "1"},
		want:         []string{"round 1 ok", "zones=- ", "canary: 1/1 rounds ok"},
		wantReplicas: 2, wantDeleted: 1,
	}, {
		name:         "interrupted forever: the App is deleted, exit 0",
		args:         []string{},
		cancelOn:     2,
		want:         []string{"round 1 ok", "round 2 interrupted step=scale", `cleanup="deleted"`, "canary: 1/1 rounds ok"},
		wantReplicas: 3, wantZones: []string{"a", "b", "c"}, wantDeleted: 2,
	}, {
		name:         "interrupted with --rounds: exit 1",
		args:         []string{"--rounds", "3"},
		cancelOn:     1,
		wantCode:     1,
		want:         []string{"round 1 interrupted step=scale", `cleanup="deleted"`, "canary: 0/0 rounds ok"},
		wantReplicas: 3, wantZones: []string{"a", "b", "c"}, wantDeleted: 1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cliEnv(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := &canaryGateway{down: tt.down, forbidClusters: tt.forbid, cancel: cancel}
			if tt.cancelOn > 0 {
				f.cancelOn = fmt.Sprintf("-%d", tt.cancelOn)
			}
			url := newCanaryGateway(t, f)
			args := append([]string{"--server", url, "--token", "t", "-p", "demo", "--interval", "0", "--name-prefix", "probe"}, tt.args...)
			done := make(chan struct{})
			var (
				out, errOut string
				err         error
			)
			go func() {
				defer close(done)
				out, errOut, err = runCanaryCLI(ctx, args...)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("canary still running after 30s")
			}
			t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
			if got := exitCode(err); got != tt.wantCode {
				t.Errorf("exit code %d (err %v), want %d", got, err, tt.wantCode)
			}
			rest := out
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Errorf("output lacks %q (in order)", w)
					continue
				}
				rest = rest[i+len(w):]
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, d := range f.created {
				var spec struct {
					Replicas  int32 `json:"replicas"`
					Placement struct {
						Zones []string `json:"zones"`
					} `json:"placement"`
				}
				_ = json.Unmarshal(d.Spec, &spec)
				if spec.Replicas != tt.wantReplicas || !slices.Equal(spec.Placement.Zones, tt.wantZones) {
					t.Errorf("created %s with %d replicas in zones %v, want %d in %v", d.Metadata.Name, spec.Replicas, spec.Placement.Zones, tt.wantReplicas, tt.wantZones)
				}
				if !strings.HasPrefix(d.Metadata.Name, "probe-") || d.Metadata.Labels[canaryLabel] == "" {
					t.Errorf("created %s labelled %v, want a probe- name and the %s label", d.Metadata.Name, d.Metadata.Labels, canaryLabel)
				}
			}
			if len(f.deleted) != tt.wantDeleted || len(f.apps) != 0 {
				t.Errorf("deleted %v, left %d apps; want %d deleted, none left", f.deleted, len(f.apps), tt.wantDeleted)
			}
		})
	}
}

func TestCanaryFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--rounds", "-1"}, "--rounds -1"},
		{[]string{"--interval", "-1s"}, "--interval -1s"},
		{[]string{"--timeout", "0s"}, "--timeout 0s"},
		{[]string{"--name-prefix", "Canary_1"}, `--name-prefix "Canary_1"`},
		{[]string{"--name-prefix", strings.Repeat("c", 41)}, "--name-prefix"},
		{[]string{"--zones", "a,,b"}, "--zones: an empty zone name"},
		{[]string{"--image", ""}, "--image"},
		{[]string{"--metrics-listen", "127.0.0.1:-5"}, "--metrics-listen 127.0.0.1:-5"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cliEnv(t)
			f := &canaryGateway{}
			url := newCanaryGateway(t, f)
			_, _, err := runCanaryCLI(context.Background(), append([]string{"--server", url, "-p", "demo", "--rounds", "1"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want one containing %q", err, tt.want)
			}
			if len(f.created) != 0 {
				t.Errorf("created %d Apps with bad flags", len(f.created))
			}
		})
	}
	t.Run("no project", func(t *testing.T) {
		cliEnv(t)
		_, _, err := runCanaryCLI(context.Background(), "--server", "http://127.0.0.1:1", "--rounds", "1")
		if err == nil || !strings.Contains(err.Error(), "no project") {
			t.Errorf("err %v, want no project", err)
		}
	})
}

func TestReadiness(t *testing.T) {
	running := func(ready int32, zones map[string]computeapi.Counts) computeapi.WorkloadStatus {
		return computeapi.WorkloadStatus{Phase: "Running", ObservedGeneration: 2, Desired: 3, Ready: ready, Zones: zones}
	}
	all := map[string]computeapi.Counts{"a": {Desired: 1, Ready: 1}, "b": {Desired: 1, Ready: 1}, "c": {Desired: 1, Ready: 1}}
	tests := []struct {
		name  string
		st    computeapi.WorkloadStatus
		want  int32
		gen   int64
		zones []string
		err   string
	}{
		{"ready in every zone", running(3, all), 3, 2, []string{"a", "b", "c"}, ""},
		{"zones not checked", running(3, nil), 3, 2, nil, ""},
		{"older generation", running(3, all), 3, 3, []string{"a"}, "status is of generation 2, want 3"},
		{"pending", computeapi.WorkloadStatus{Phase: "Pending"}, 3, 1, []string{"a"},
			"status is of generation 0, want 1; phase Pending; ready 0/0, want 3/3; no ready replica in zone a (zones none)"},
		{"not all ready", running(2, all), 3, 2, nil, "ready 2/3, want 3/3"},
		{"other replica count", running(3, all), 4, 2, nil, "ready 3/3, want 4/4"},
		{"a zone without a ready replica", running(3, map[string]computeapi.Counts{"a": {Desired: 2, Ready: 2}, "b": {Desired: 1, Ready: 1}, "c": {Desired: 0}}),
			3, 2, []string{"a", "b", "c", "d"}, "no ready replica in zone c, d (zones a:2/2 b:1/1 c:0/0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if err := readiness(tt.st, tt.want, tt.gen, tt.zones); err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tt.err, got); diff != "" {
				t.Errorf("readiness (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCoverage(t *testing.T) {
	evs := func(names ...string) []computeapi.Event {
		var l []computeapi.Event
		for _, n := range names {
			l = append(l, computeapi.Event{Event: n})
		}
		return l
	}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"every event", eventCoverage(evs("admitted", "scheduled", "propagated", "running", "scaled", "updated"), canaryEvents), ""},
		{"events missing", eventCoverage(evs("admitted", "scheduled"), canaryEvents), "no propagated, running, scaled event (of 2)"},
		{"lines from every cluster", logCoverage(map[string]int{"zone-a": 1, "zone-b": 3}, []string{"zone-a", "zone-b"}), ""},
		{"a cluster without lines", logCoverage(map[string]int{"zone-a": 1}, []string{"zone-a", "zone-b"}), "no log line from cluster zone-b"},
		{"no cluster known, some line", logCoverage(map[string]int{"zone-a": 1}, nil), ""},
		{"no line at all", logCoverage(map[string]int{}, nil), "no log line"},
		{"zones of uncordoned clusters", errors.New(strings.Join(zonesOf([]computeapi.Cluster{{Zone: "c"}, {Zone: "a"}, {Zone: "c"}, {Zone: "d", Cordoned: true}, {}}), ",")), "a,c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if tt.err != nil {
				got = tt.err.Error()
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCanaryMetrics runs a passing and a failing round and reads the
// canary's /metrics.
func TestCanaryMetrics(t *testing.T) {
	f := &canaryGateway{}
	url := newCanaryGateway(t, f)
	c, err := sdk.New(url)
	if err != nil {
		t.Fatal(err)
	}
	o := canaryOptions{rounds: 1, stepTimeout: time.Second, namePrefix: "m", image: "busybox"}
	k := newCanary(c, "demo", o, io.Discard, "table", slog.New(slog.DiscardHandler))
	addr, stop, err := k.serveMetrics(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if r := k.round(context.Background(), 1); !r.OK {
		t.Fatalf("round 1: %+v", r)
	}
	f.mu.Lock()
	f.down = "b"
	f.mu.Unlock()
	if r := k.round(context.Background(), 2); r.OK || r.FailedStep != stepWaitRunning {
		t.Fatalf("round 2 passed or failed elsewhere: %+v", r)
	}

	// The exposition, as a scraper reads it, parsed by Prometheus' own
	// parser.
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "atoll_canary_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			key := mf.GetName()
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				got[key] = m.GetCounter().GetValue()
			case m.Gauge != nil && !strings.HasSuffix(mf.GetName(), "timestamp_seconds"):
				got[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				got[key+"_count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	want := map[string]float64{
		"atoll_canary_rounds_total{outcome=success}":                  1,
		"atoll_canary_rounds_total{outcome=failure}":                  1,
		"atoll_canary_last_round_success":                             0,
		"atoll_canary_steps_total{outcome=success,step=create}":       2,
		"atoll_canary_steps_total{outcome=failure,step=create}":       0,
		"atoll_canary_steps_total{outcome=success,step=wait-running}": 1,
		"atoll_canary_steps_total{outcome=failure,step=wait-running}": 1,
		"atoll_canary_steps_total{outcome=success,step=delete}":       1,
		"atoll_canary_steps_total{outcome=failure,step=delete}":       0,
		"atoll_canary_step_duration_seconds{step=create}_count":       2,
		"atoll_canary_step_duration_seconds{step=wait-running}_count": 1,
		"atoll_canary_step_duration_seconds{step=delete}_count":       1,
		"atoll_canary_steps_total{outcome=success,step=scale}":        1,
		"atoll_canary_steps_total{outcome=failure,step=scale}":        0,
		"atoll_canary_step_duration_seconds{step=scale}_count":        1,
		"atoll_canary_steps_total{outcome=success,step=logs}":         1,
		"atoll_canary_steps_total{outcome=failure,step=logs}":         0,
		"atoll_canary_step_duration_seconds{step=logs}_count":         1,
		"atoll_canary_steps_total{outcome=success,step=events}":       1,
		"atoll_canary_steps_total{outcome=failure,step=events}":       0,
		"atoll_canary_step_duration_seconds{step=events}_count":       1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}

	for _, line := range []string{
		`atoll_canary_rounds_total{outcome="failure"} 1`,
		`atoll_canary_steps_total{outcome="failure",step="wait-running"} 1`,
		`atoll_canary_step_duration_seconds_count{step="create"} 2`,
	} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", line, body)
		}
	}
}
