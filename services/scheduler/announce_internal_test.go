package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRecentFrom(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		written []stamp
		want    uint64
	}{
		{"none", nil, 0},
		{"all recent", []stamp{{1, t0}, {2, t0.Add(time.Minute)}}, 1},
		{"older ones left out", []stamp{{1, t0}, {5, t0.Add(10 * time.Minute)}, {9, t0.Add(11 * time.Minute)}}, 5},
		// The window counts back from the newest write, not from now: a
		// scheduler down for hours still announces what it wrote last.
		{"from the newest, not now", []stamp{{3, t0.Add(-time.Hour)}, {4, t0.Add(-3 * time.Hour)}}, 3},
		{"out of order times", []stamp{{7, t0.Add(time.Minute)}, {8, t0}, {9, t0.Add(3 * time.Minute)}}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, recentFrom(tc.written, 2*time.Minute))
		})
	}
}
