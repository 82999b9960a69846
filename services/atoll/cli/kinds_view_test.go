package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

func TestCronJobAndDaemonViews(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 5, 30, 0, time.UTC)
	cron := computeapi.Workload{Kind: api.KindCronJob, Metadata: computeapi.Metadata{Name: "tick"}, Status: computeapi.WorkloadStatus{
		Phase: api.PhaseRunning, Desired: 1,
		CronJob: computeapi.CronJobStatus{Cluster: "zone-b", Active: 1, LastScheduleTime: now.Add(-30 * time.Second),
			Runs: []computeapi.CronJobRun{{Name: "tick-29000000", Cluster: "zone-b", ScheduledTime: now.Add(-90 * time.Second), Outcome: computeapi.CronJobRunOutcomeSucceeded, Succeeded: 1}}},
	}}
	daemon := computeapi.Workload{Kind: api.KindDaemon, Metadata: computeapi.Metadata{Name: "agent"}, Status: computeapi.WorkloadStatus{
		Phase: api.PhaseProgressing, Desired: 5, Ready: 4,
		Daemon: computeapi.DaemonStatus{Desired: 5, Current: 5, Ready: 4, Updated: 5, Behind: []string{"zone-c"},
			Clusters: map[string]computeapi.DaemonCounts{"zone-a": {Desired: 2, Current: 2, Ready: 2, Updated: 2}, "zone-c": {Desired: 3, Current: 3, Ready: 2, Updated: 3}}},
	}}
	var get bytes.Buffer
	printWorkloads(&get, []computeapi.Workload{cron, daemon}, now)
	for _, want := range []string{"1 active, last 30s ago", "4/5"} {
		if !strings.Contains(get.String(), want) {
			t.Errorf("get lacks %q:\n%s", want, get.String())
		}
	}
	tests := []struct {
		w    computeapi.Workload
		want []string
	}{
		{cron, []string{"Cluster:", "zone-b", "Active runs:", "tick-29000000", "Succeeded"}},
		{daemon, []string{"zone-c", "(total)", "Behind: zone-c"}},
	}
	for _, tc := range tests {
		var out bytes.Buffer
		describeWorkload(&out, tc.w, nil, nil, now)
		for _, want := range tc.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("describe %s lacks %q:\n%s", tc.w.Kind, want, out.String())
			}
		}
	}
}
