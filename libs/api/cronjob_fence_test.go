package api

import (
	"testing"
	"time"
)

// TestCronFence: fire-from is rounded up and fire-until down to the
// second, so a bound written in RFC 3339 never narrows the gap between
// them; fire-from after a move is past any lease renewed before it.
func TestCronFence(t *testing.T) {
	tests := []struct {
		at, from, until string
	}{
		{"2026-11-23T02:30:00Z", "2026-11-23T02:31:45Z", "2026-11-23T02:31:30Z"},
		{"2026-11-23T02:30:00.2Z", "2026-11-23T02:31:46Z", "2026-11-23T02:31:30Z"},
		{"2026-11-23T02:30:59.9Z", "2026-11-23T02:32:45Z", "2026-11-23T02:32:29Z"},
	}
	for _, tc := range tests {
		at, _ := time.Parse(time.RFC3339Nano, tc.at)
		if got := CronFireFrom(at).Format(time.RFC3339); got != tc.from {
			t.Errorf("CronFireFrom(%s) = %s, want %s", tc.at, got, tc.from)
		}
		if got := CronFireUntil(at).Format(time.RFC3339); got != tc.until {
			t.Errorf("CronFireUntil(%s) = %s, want %s", tc.at, got, tc.until)
		}
		// A renewal up to the margin after the move ends before fire-from.
		if !CronFireUntil(at.Add(CronFenceMargin - time.Millisecond)).Before(CronFireFrom(at)) {
			t.Errorf("a renewal %v after a move at %s reaches its fire-from", CronFenceMargin, tc.at)
		}
	}
	if CronFenceRenew*3 != CronFenceLease {
		t.Errorf("renewal every %v for a lease of %v: want two renewals to fail before it runs out", CronFenceRenew, CronFenceLease)
	}
}
