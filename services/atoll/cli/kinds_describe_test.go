package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

// spaces collapses runs of blanks so table columns compare as words.
var spaces = regexp.MustCompile(`[ \t]+`)

func squeeze(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(spaces.ReplaceAllString(l, " "))
	}
	return strings.Join(lines, "\n")
}

func rawSpec(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDescribeKinds: describe shows what the console's cards show: a
// CronJob's cluster, schedule, times and runs with their outcome; a
// Daemon's counts per cluster with the clusters behind marked (those not
// reporting yet included); an App's rollout with its zones in order, their
// state and times, why it is paused, its policy and the last operation.
func TestDescribeKinds(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 5, 30, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	clk := func(d time.Duration) string { return ago(d).Local().Format(time.TimeOnly) }
	bake, deadline := int32(30), int32(300)
	cronStatus := computeapi.WorkloadStatus{Phase: api.PhaseRunning, Desired: 1, CronJob: computeapi.CronJobStatus{
		Cluster: "zone-b", Active: 1, LastScheduleTime: ago(time.Minute), LastSuccessfulTime: ago(11 * time.Minute),
		Runs: []computeapi.CronJobRun{
			{Name: "tick-100", Cluster: "zone-a", ScheduledTime: ago(11 * time.Minute), Outcome: computeapi.CronJobRunOutcomeSucceeded, Succeeded: 1},
			{Name: "tick-105", Cluster: "zone-b", ScheduledTime: ago(6 * time.Minute), Outcome: computeapi.CronJobRunOutcomeFailed, Failed: 1},
		}}}
	daemonStatus := computeapi.WorkloadStatus{Phase: api.PhaseProgressing, Desired: 5, Ready: 4, Daemon: computeapi.DaemonStatus{
		Desired: 5, Current: 5, Ready: 4, Updated: 5, Behind: []string{"zone-c", "zone-d"},
		Clusters: map[string]computeapi.DaemonCounts{"zone-a": {Desired: 2, Current: 2, Ready: 2, Updated: 2}, "zone-c": {Desired: 3, Current: 3, Ready: 2, Updated: 3}}}}
	app := func(ctl bool) computeapi.Workload {
		w := computeapi.Workload{Kind: api.KindApp, Metadata: computeapi.Metadata{Name: "web"},
			Spec: rawSpec(t, api.AppSpec{Rollout: &api.RolloutStrategy{Order: []string{"c", "a", "b"}, BakeSeconds: &bake, DeadlineSeconds: &deadline, OnFailure: api.RolloutRollbackZone}})}
		if ctl {
			w.Control.Rollout.Paused, w.Control.Rollout.Op, w.Control.Rollout.At = true, api.OpRolloutPause, ago(5*time.Second)
		}
		return w
	}
	zones := []computeapi.ZoneRollout{
		{Zone: "c", State: api.ZoneDone, Revision: "4e5f", Started: ago(3 * time.Minute), AvailableSince: ago(150 * time.Second), Finished: ago(2 * time.Minute)},
		{Zone: "a", State: api.ZoneBaking, Revision: "4e5f", Started: ago(2 * time.Minute), AvailableSince: ago(10 * time.Second)},
		{Zone: "b", State: api.ZonePending, Revision: "0a1b"},
	}
	progressing := &computeapi.Rollout{Phase: api.RolloutProgressing, Stable: "0a1b", Target: "4e5f", Zones: zones}
	paused := &computeapi.Rollout{Phase: api.RolloutPaused, Stable: "0a1b", Target: "4e5f", Message: "paused by a user", Zones: zones}
	failed := &computeapi.Rollout{Phase: api.RolloutPaused, Stable: "0a1b", Target: "4e5f", Message: "zone a: not available within 5m0s",
		Zones: []computeapi.ZoneRollout{{Zone: "a", State: api.ZoneRolledBack, Revision: "0a1b", Started: ago(6 * time.Minute), Finished: ago(time.Minute), Message: "not available within 5m0s"}}}

	tests := []struct {
		name      string
		describe  func(*bytes.Buffer)
		want, not []string
	}{
		{
			name: "cronjob with its schedule and runs",
			describe: func(b *bytes.Buffer) {
				describeWorkload(b, computeapi.Workload{Kind: api.KindCronJob, Metadata: computeapi.Metadata{Name: "tick"}, Status: cronStatus,
					Spec: rawSpec(t, api.CronJobSpec{Schedule: "*/5 * * * *", TimeZone: "Europe/Paris", ConcurrencyPolicy: "Forbid", StartingDeadlineSeconds: new(int64(30))})}, nil, nil, now)
			},
			want: []string{"Cluster: zone-b", "Schedule: */5 * * * * (Europe/Paris)", "Concurrency: Forbid", "Starting deadline: 30s",
				"Last schedule: " + ago(time.Minute).Local().Format(time.RFC3339) + " (60s ago)", "Last success: " + ago(11*time.Minute).Local().Format(time.RFC3339) + " (11m ago)",
				"Active runs: 1", "JOB CLUSTER SCHEDULED OUTCOME SUCCEEDED FAILED",
				"tick-100 zone-a " + ago(11*time.Minute).Local().Format(time.RFC3339) + " Succeeded 1 0",
				"tick-105 zone-b " + ago(6*time.Minute).Local().Format(time.RFC3339) + " Failed 0 1"},
		},
		{
			name: "cronjob in the cluster's time zone",
			describe: func(b *bytes.Buffer) {
				describeWorkload(b, computeapi.Workload{Kind: api.KindCronJob, Metadata: computeapi.Metadata{Name: "tick"},
					Status: computeapi.WorkloadStatus{Phase: api.PhasePending}, Spec: rawSpec(t, api.CronJobSpec{Schedule: "@hourly"})}, nil, nil, now)
			},
			want: []string{"Cluster: -", "Schedule: @hourly (UTC)", "Last schedule: -", "Last success: -", "Active runs: 0"},
			not:  []string{"Concurrency:", "Runs:"},
		},
		{
			name: "daemon with clusters behind",
			describe: func(b *bytes.Buffer) {
				describeWorkload(b, computeapi.Workload{Kind: api.KindDaemon, Metadata: computeapi.Metadata{Name: "agent"}, Status: daemonStatus}, nil, nil, now)
			},
			want: []string{"CLUSTER DESIRED CURRENT READY UPDATED STATE", "zone-a 2 2 2 2 up to date", "zone-c 3 3 2 3 behind",
				"zone-d 0 0 0 0 behind", "(total) 5 5 4 5", "Behind: zone-c, zone-d"},
		},
		{
			name:     "app rollout progressing",
			describe: func(b *bytes.Buffer) { describeRollout(b, app(false), progressing, nil, now) },
			want: []string{"Rollout:", "Phase: Progressing", "Zone order: c → a → b", "Stable: 0a1b", "Rolling out: 4e5f",
				"Policy: on failure RollbackZone, bake 30s, deadline 5m0s per zone",
				"STEP ZONE STATE REVISION STARTED AVAILABLE SINCE FINISHED MESSAGE",
				"1 c Done 4e5f " + clk(3*time.Minute) + " (3m ago) " + clk(150*time.Second) + " (2m30s ago) " + clk(2*time.Minute) + " (2m ago) -",
				"2 a Baking 4e5f " + clk(2*time.Minute) + " (2m ago) " + clk(10*time.Second) + " (10s ago) - -",
				"3 b Pending 0a1b - - - -"},
			not: []string{"Paused:", "Last operation:"},
		},
		{
			name:     "app rollout paused by a user",
			describe: func(b *bytes.Buffer) { describeRollout(b, app(true), paused, nil, now) },
			want:     []string{"Phase: Paused", "Paused: paused by a user", "Last operation: rollout-pause at " + ago(5*time.Second).Local().Format(time.RFC3339) + " (5s ago)"},
		},
		{
			name:     "app rollout pause asked, not yet held",
			describe: func(b *bytes.Buffer) { describeRollout(b, app(true), progressing, nil, now) },
			want:     []string{"Phase: Progressing", "Paused: pause requested at " + ago(5*time.Second).Local().Format(time.RFC3339) + ", not yet held by the rollout controller"},
		},
		{
			name:     "app rollout paused by a failed zone, rolled back",
			describe: func(b *bytes.Buffer) { describeRollout(b, app(false), failed, nil, now) },
			want:     []string{"Paused: zone a: not available within 5m0s", "1 a RolledBack 0a1b", "not available within 5m0s"},
		},
		{
			name: "app never changed",
			describe: func(b *bytes.Buffer) {
				describeRollout(b, computeapi.Workload{Kind: api.KindApp, Spec: rawSpec(t, api.AppSpec{})}, &computeapi.Rollout{Phase: api.RolloutComplete, Stable: "0a1b"}, nil, now)
			},
			want: []string{"Phase: Complete", "Zone order: -", "Policy: on failure Pause, bake 10s, deadline 10m0s per zone",
				"Update strategy: RollingUpdate (pods are replaced)"},
			not: []string{"STEP", "Rolling out:"},
		},
		{
			name: "app in place, pods by revision",
			describe: func(b *bytes.Buffer) {
				w := computeapi.Workload{Kind: api.KindApp, Spec: rawSpec(t, api.AppSpec{UpdateStrategy: api.UpdateInPlaceIfPossible}),
					Status: computeapi.WorkloadStatus{Zones: map[string]computeapi.Counts{
						"a": {Templates: map[string]int32{"4e5f": 3}}, "b": {Templates: map[string]int32{"0a1b": 2, "4e5f": 1}}, "c": {}}}}
				describeRollout(b, w, progressing, nil, now)
			},
			want: []string{"Update strategy: InPlaceIfPossible (image-only changes are patched into the live pods)",
				"Pods by revision:", "a: 4e5f 3", "b: 0a1b 2, 4e5f 1"},
			not: []string{"c:"},
		},
		{
			name:     "rollout unreadable",
			describe: func(b *bytes.Buffer) { describeRollout(b, app(false), nil, errors.New("503 Unavailable"), now) },
			want:     []string{"Rollout:", "(unavailable: 503 Unavailable)"},
			not:      []string{"Phase:"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			tc.describe(&b)
			got := squeeze(b.String())
			lines := strings.Split(got, "\n")
			for _, want := range tc.want {
				found := false
				for _, l := range lines {
					if strings.Contains(l, want) {
						found = true
						break
					}
				}
				if !found {
					t.Errorf("no line holds %q:\n%s", want, got)
				}
			}
			for _, not := range tc.not {
				if strings.Contains(got, not) {
					t.Errorf("holds %q:\n%s", not, got)
				}
			}
		})
	}
}

// TestDescribeAppReadsItsRollout: `atoll describe app` reads the App's
// rollout from the API and shows it (table) or includes it (json).
func TestDescribeAppReadsItsRollout(t *testing.T) {
	cliEnv(t)
	var rolloutReads atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/projects/demo/workloads/{kind}/web", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, computeapi.Workload{Kind: api.KindApp, Metadata: computeapi.Metadata{Project: "demo", Name: "web"},
			Spec: json.RawMessage(`{"replicas":3,"rollout":{"order":["b","a"]}}`), Status: computeapi.WorkloadStatus{Phase: api.PhaseProgressing}})
	})
	mux.HandleFunc("GET /v1/projects/demo/apps/web/rollout", func(w http.ResponseWriter, r *http.Request) {
		rolloutReads.Add(1)
		writeJSON(w, 200, computeapi.Rollout{Phase: api.RolloutProgressing, Stable: "0a1b", Target: "4e5f", Zones: []computeapi.ZoneRollout{
			{Zone: "b", State: api.ZoneUpdating, Revision: "4e5f"}, {Zone: "a", State: api.ZonePending, Revision: "0a1b"}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base := []string{"describe", "app", "web", "--server", srv.URL, "--token", "good", "-p", "demo"}

	out, _, err := runCLI(t, "", base...)
	if err != nil {
		t.Fatal(err)
	}
	got := squeeze(out)
	for _, want := range []string{"Rollout:", "Phase: Progressing", "Zone order: b → a", "1 b Updating 4e5f - - - -", "2 a Pending 0a1b - - - -"} {
		if !strings.Contains(got, want) {
			t.Errorf("describe lacks %q:\n%s", want, got)
		}
	}
	out, _, err = runCLI(t, "", append(base, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Rollout computeapi.Rollout `json:"rollout"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Rollout.Zones) != 2 || doc.Rollout.Target != "4e5f" {
		t.Errorf("json rollout: %v\n%s", err, out)
	}
	if n := rolloutReads.Load(); n != 2 {
		t.Errorf("the rollout was read %d times, want once per describe", n)
	}
}
