package gateway

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/computeapi"
)

// TestSLIHistory feeds the ring at chosen times and reads the hour back.
func TestSLIHistory(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC) // a minute's start
	at := func(m, sec int) time.Time {
		return t0.Add(time.Duration(m)*time.Minute + time.Duration(sec)*time.Second)
	}
	type point struct {
		Minute                   int // minutes after t0
		Requests, Errors, Launch int64
		P50, P95, Max            float64
	}
	type req struct {
		min, sec int
		failed   bool
	}
	type launch struct {
		min, sec int
		d        time.Duration
	}
	tests := []struct {
		name     string
		requests []req
		launches []launch
		now      time.Time
		want     []point // the minutes with anything in them
	}{
		{
			name: "empty",
			now:  at(5, 0),
		},
		{
			name:     "requests and errors per minute",
			requests: []req{{0, 1, false}, {0, 59, true}, {1, 0, false}, {3, 30, true}},
			now:      at(3, 45),
			want:     []point{{Minute: 0, Requests: 2, Errors: 1}, {Minute: 1, Requests: 1}, {Minute: 3, Requests: 1, Errors: 1}},
		},
		{
			name:     "one launch: the quantiles never exceed it",
			launches: []launch{{2, 0, 1500 * time.Millisecond}},
			now:      at(2, 10),
			// 1.5 s falls in (1.28, 2.56]; the estimates sit within it, capped by the maximum.
			want: []point{{Minute: 2, Launch: 1, P50: 1.5, P95: 1.5, Max: 1.5}},
		},
		{
			name: "quantiles from buckets",
			// 10 launches: 9 in (0.01, 0.02], one of 160 s in (81.92, 163.84].
			launches: []launch{
				{0, 0, 15 * time.Millisecond}, {0, 1, 15 * time.Millisecond}, {0, 2, 15 * time.Millisecond},
				{0, 3, 15 * time.Millisecond}, {0, 4, 15 * time.Millisecond}, {0, 5, 15 * time.Millisecond},
				{0, 6, 15 * time.Millisecond}, {0, 7, 15 * time.Millisecond}, {0, 8, 15 * time.Millisecond},
				{0, 9, 160 * time.Second},
			},
			now:  at(0, 30),
			want: []point{{Minute: 0, Launch: 10, P50: 0.01 + 0.01*5/9, P95: 81.92 + (163.84-81.92)*0.5, Max: 160}},
		},
		{
			name:     "over an hour old: gone",
			requests: []req{{0, 0, true}, {59, 0, false}, {60, 0, false}},
			now:      at(60, 0),
			want:     []point{{Minute: 59, Requests: 1}, {Minute: 60, Requests: 1}},
		},
		{
			name: "a late write older than the slot's minute is dropped",
			// minute 61 takes minute 1's slot; a write for minute 1 arriving afterwards is too old.
			requests: []req{{61, 0, false}, {1, 0, true}},
			now:      at(61, 0),
			want:     []point{{Minute: 61, Requests: 1}},
		},
		{
			name:     "above every bucket: the maximum",
			launches: []launch{{0, 0, 10 * time.Minute}},
			now:      at(0, 0),
			want:     []point{{Minute: 0, Launch: 1, P50: 600, P95: 600, Max: 600}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newSLIHistory()
			for _, r := range tt.requests {
				h.request(at(r.min, r.sec), r.failed)
			}
			for _, l := range tt.launches {
				h.launch(at(l.min, l.sec), l.d)
			}
			got := h.snapshot(tt.now)
			if got.IntervalSeconds != 60 || len(got.Minutes) != sliMinutes {
				t.Fatalf("interval %d s and %d minutes, want 60 s and %d", got.IntervalSeconds, len(got.Minutes), sliMinutes)
			}
			if first, last := got.Minutes[0].Start, got.Minutes[sliMinutes-1].Start; !last.Equal(tt.now.Truncate(time.Minute)) || last.Sub(first) != 59*time.Minute {
				t.Fatalf("minutes from %s to %s, want the hour ending with %s", first, last, tt.now.Truncate(time.Minute))
			}
			var points []point
			for _, m := range got.Minutes {
				if m == (computeapi.SLIMinute{Start: m.Start}) {
					continue
				}
				points = append(points, point{Minute: int(m.Start.Sub(t0) / time.Minute), Requests: m.Requests, Errors: m.Errors,
					Launch: m.Launches, P50: m.LaunchP50Seconds, P95: m.LaunchP95Seconds, Max: m.LaunchMaxSeconds})
			}
			if diff := cmp.Diff(tt.want, points, cmpFloat); diff != "" {
				t.Errorf("points (-want +got):\n%s", diff)
			}
		})
	}
}

// cmpFloat compares floats to a millionth.
var cmpFloat = cmp.Comparer(func(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 })

// A nil history (a gateway without an admin server) reads as an empty hour.
func TestSLIHistoryNil(t *testing.T) {
	var h *sliHistory
	h.request(time.Now(), true)
	h.launch(time.Now(), time.Second)
	got := h.snapshot(time.Now())
	if len(got.Minutes) != sliMinutes {
		t.Fatalf("%d minutes, want %d", len(got.Minutes), sliMinutes)
	}
	for _, m := range got.Minutes {
		if m.Requests != 0 || m.Launches != 0 {
			t.Fatalf("minute %s of a nil history: %+v", m.Start, m)
		}
	}
}
