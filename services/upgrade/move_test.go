package upgrade

import (
	"testing"
	"time"
)

// TestNoneSince: the displaced workloads are available again when no
// pending pod was made since the node's drain started (to the second);
// older pending pods are not the rotation's.
func TestNoneSince(t *testing.T) {
	since := time.Date(2026, 11, 22, 10, 0, 0, 500e6, time.UTC)
	for _, c := range []struct {
		name    string
		created []time.Time
		want    bool
	}{
		{"no pending pod", nil, true},
		{"only older", []time.Time{since.Add(-time.Minute)}, true},
		{"one made since", []time.Time{since.Add(-time.Minute), since.Add(time.Second)}, false},
		{"same second", []time.Time{since.Truncate(time.Second)}, false},
	} {
		if got := noneSince(c.created, since); got != c.want {
			t.Errorf("%s: noneSince = %v, want %v", c.name, got, c.want)
		}
	}
}
