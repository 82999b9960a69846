package cli

import (
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/computeapi"
)

func TestDescribeShowsTheQueue(t *testing.T) {
	at := time.Date(2026, 11, 22, 23, 50, 0, 0, time.UTC)
	tests := []struct {
		name      string
		st        computeapi.WorkloadStatus
		want, not []string
	}{
		{"queued and preempted",
			computeapi.WorkloadStatus{Phase: "Unschedulable", Queue: "Preemptible", Position: 3, QueuedAt: at, PreemptedBy: "demo.app.urgent"},
			[]string{"Queue:", "Preemptible position 3 (as of " + at.Local().Format(time.RFC3339) + ")", "Preempted by:", "demo.app.urgent"}, nil},
		{"queued", computeapi.WorkloadStatus{Phase: "Unschedulable", Queue: "Reserved", Position: 1, QueuedAt: at},
			[]string{"Reserved position 1 (as of "}, []string{"Preempted by:"}},
		{"placed", computeapi.WorkloadStatus{Phase: "Running"}, nil, []string{"Queue:", "Preempted by:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cliEnv(t)
			f, url := newFake(t)
			f.workloads = []computeapi.Workload{{Kind: "App", Metadata: computeapi.Metadata{Project: "demo", Name: "waits", Generation: 1}, Status: tc.st}}
			out, _, err := runCLI(t, "", "describe", "app", "waits", "--server", url, "--token", "good", "-p", "demo")
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("describe lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("describe has %q:\n%s", n, out)
				}
			}
		})
	}
}

func TestQuotaShowsWhatPreemptibleBorrows(t *testing.T) {
	cliEnv(t)
	f, url := newFake(t)
	f.quota = computeapi.Quota{Project: "demo", Tiers: []computeapi.TierQuota{
		{Tier: "Reserved", Default: true, Used: computeapi.Resources{MilliCPU: 2000, Pods: 1}},
		{Tier: "OnDemand", Default: true},
		{Tier: "Preemptible", Default: true, Used: computeapi.Resources{MilliCPU: 6500, MemoryBytes: 3 << 30, Pods: 3},
			Borrowed: computeapi.Resources{MilliCPU: 6500, MemoryBytes: 3 << 30, Pods: 3}, Reclaimable: true},
	}}
	out, _, err := runCLI(t, "", "quota", "--server", url, "--token", "good", "-p", "demo")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "TIER") || !strings.HasPrefix(lines[3], "Preemptible") || !strings.Contains(lines[3], "6500m/0") {
		t.Errorf("table:\n%s", out)
	}
	for _, w := range []string{"Preemptible borrows cpu 6500m, memory 3Gi, pods 3 of the capacity the other tiers leave idle.", "It is reclaimable"} {
		if !strings.Contains(out, w) {
			t.Errorf("quota lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "Reserved borrows") || strings.Contains(out, "gpus") {
		t.Errorf("only Preemptible borrows, without GPUs:\n%s", out)
	}

	// Nothing borrowed: no note.
	f.quota.Tiers[2].Borrowed, f.quota.Tiers[2].Reclaimable = computeapi.Resources{}, false
	out, _, err = runCLI(t, "", "quota", "--server", url, "--token", "good", "-p", "demo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "borrows") {
		t.Errorf("a note without anything borrowed:\n%s", out)
	}
}
