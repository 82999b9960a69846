package cli

import (
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/computeapi"
)

func TestLimitText(t *testing.T) {
	for _, tc := range []struct {
		lim  computeapi.QuotaLimit
		want string
	}{
		{computeapi.QuotaLimit{MilliCPU: new(int64(64_000)), MemoryBytes: new(int64(256 << 30))}, "cpu=64,memory=256Gi"},
		{computeapi.QuotaLimit{MilliCPU: new(int64(500)), Gpus: new(int64(0)), Pods: new(int64(200))}, "cpu=500m,gpus=0,pods=200"},
		{computeapi.QuotaLimit{StorageBytes: new(int64(1 << 40))}, "storage=1Ti"},
		{computeapi.QuotaLimit{}, "-"},
	} {
		if got := limitText(tc.lim); got != tc.want {
			t.Errorf("limitText(%+v) = %q, want %q", tc.lim, got, tc.want)
		}
	}
}

func TestPrintQuotaRequestsShowsTheOutcome(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	var b strings.Builder
	printQuotaRequests(&b, []computeapi.QuotaRequest{
		{Id: "web-1", Project: "web", Tier: "OnDemand", Limit: computeapi.QuotaLimit{MilliCPU: new(int64(64_000))}, Reason: "launch",
			State: "rejected", Requester: "alice", Reviewer: "admin", Decision: "not this quarter", Created: now.Add(-time.Hour)},
		{Id: "web-2", Project: "web", Tier: "Reserved", Limit: computeapi.QuotaLimit{Pods: new(int64(10))}, Reason: "more",
			State: "pending", Requester: "alice", Created: now.Add(-time.Minute)},
	}, now)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two rows:\n%s", b.String())
	}
	for i, want := range [][]string{
		{"ID", "STATE", "REVIEWER", "DECISION"},
		{"web-1", "cpu=64", "rejected", "alice", "admin", "not this quarter", "60m"},
		{"web-2", "pods=10", "pending", "alice", "-", "more", "60s"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
}
