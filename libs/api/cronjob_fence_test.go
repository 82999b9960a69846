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

// TestCronFenceFromEnv: the fence is the default unless the environment
// gives a positive lease, which sets the renewal to a third of it; a
// shortened fence keeps fire-from past any lease renewed before a move.
func TestCronFenceFromEnv(t *testing.T) {
	tests := []struct {
		name, value string
		want        CronFence
		wantErr     bool
	}{
		{"unset", "", DefaultCronFence, false},
		{"a lease of 20s", "20s", CronFence{Lease: 20 * time.Second, Renew: 20 * time.Second / 3, Margin: CronFenceMargin}, false},
		{"not a duration", "soon", DefaultCronFence, true},
		{"not positive", "0s", DefaultCronFence, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CronFenceFromEnv(func(k string) string {
				if k == EnvCronFenceLease {
					return tc.value
				}
				return ""
			})
			if (err != nil) != tc.wantErr {
				t.Errorf("err %v, want an error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("fence %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := (CronFence{}).OrDefault(); got != DefaultCronFence {
		t.Errorf("the zero fence is %+v, want the default %+v", got, DefaultCronFence)
	}
	if (CronFence{}).FireFrom(time.Time{}) != CronFireFrom(time.Time{}) {
		t.Error("the zero fence's fire-from is not the default's")
	}
	f := CronFenceWithLease(20 * time.Second)
	at := time.Date(2026, 11, 23, 2, 30, 0, 200_000_000, time.UTC)
	if got, want := f.FireFrom(at), time.Date(2026, 11, 23, 2, 30, 36, 0, time.UTC); !got.Equal(want) {
		t.Errorf("FireFrom(%v) = %v, want %v", at, got, want)
	}
	if !f.FireUntil(at.Add(f.Margin - time.Millisecond)).Before(f.FireFrom(at)) {
		t.Errorf("a renewal %v after a move at %v reaches its fire-from", f.Margin, at)
	}
}
