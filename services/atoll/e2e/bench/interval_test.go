package bench

import (
	"slices"
	"testing"
	"time"
)

func TestRatioInterval(t *testing.T) {
	samples := func(n int, d time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d + time.Duration(i)*time.Microsecond
		}
		return out
	}
	steady := [][]time.Duration{samples(300, 10*time.Millisecond), samples(300, 10*time.Millisecond), samples(300, 10*time.Millisecond), samples(300, 10*time.Millisecond)}
	// One round of four with a stall: 10 samples at 50 ms.
	stalled := slices.Clone(steady)
	stalled[2] = append(samples(290, 10*time.Millisecond), samples(10, 50*time.Millisecond)...)
	tests := []struct {
		name               string
		base, of           [][]time.Duration
		loAtMost           float64
		hiAtLeast, hiBelow float64
	}{
		{"same rounds", steady, steady, 1, 1, 1.01},
		{"one stalled round on the measured side", steady, stalled, 1, 4, 6},
		{"one stalled round on the baseline", stalled, steady, 1, 1, 1.01},
		// Round i of each side was measured at once: a stall they shared
		// moves both, not the ratio.
		{"a stall both sides shared", stalled, stalled, 1, 1, 1.01},
		// Sides of different counts are drawn apart.
		{"unpaired: one stalled round on the measured side", steady[:3], stalled, 1, 4, 6},
		{"unpaired: the same stalled rounds", stalled[1:], stalled, 1, 4, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi := ratioInterval(tt.base, tt.of, 1000)
			if lo > tt.loAtMost || hi < tt.hiAtLeast || hi >= tt.hiBelow || lo > hi {
				t.Errorf("interval [%.2f, %.2f]: want lo <= %.2f and %.2f <= hi < %.2f", lo, hi, tt.loAtMost, tt.hiAtLeast, tt.hiBelow)
			}
		})
	}
	if lo, hi := ratioInterval(nil, steady, 100); lo != 0 || hi != 0 {
		t.Errorf("no baseline: [%v, %v], want [0, 0]", lo, hi)
	}
}

func TestMedianRoundP99(t *testing.T) {
	round := func(p99 time.Duration) []time.Duration {
		out := make([]time.Duration, 100)
		for i := range out {
			out[i] = time.Millisecond
		}
		out[98], out[99] = p99, p99 // the 99th of 100 samples
		return out
	}
	milli := time.Millisecond
	tests := []struct {
		name   string
		rounds [][]time.Duration
		want   time.Duration
	}{
		{"none", nil, 0},
		{"odd", [][]time.Duration{round(30 * milli), round(10 * milli), round(20 * milli)}, 20 * milli},
		{"even: the mean of the middle two", [][]time.Duration{round(10 * milli), round(200 * milli), round(12 * milli), round(14 * milli)}, 13 * milli},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := medianRoundP99(tt.rounds); got != tt.want {
				t.Errorf("medianRoundP99 = %v, want %v", got, tt.want)
			}
		})
	}
}

// pool sums each process's CPU over the rounds, a process missing from a
// round counting nothing there, and counts every round's submissions.
func TestPoolCPUBy(t *testing.T) {
	rounds := []sizeResult{
		{submissions: 300, inRound: 600, cpuBy: map[string]time.Duration{"admission-0": 100 * time.Millisecond, "nats-server": 400 * time.Millisecond}},
		{submissions: 300, inRound: 600, cpuBy: map[string]time.Duration{"admission-0": 150 * time.Millisecond}},
	}
	got := pool(rounds)
	if got.submissions != 600 || got.inRound != 1200 {
		t.Errorf("submissions = %d, inRound = %d, want 600 and 1200", got.submissions, got.inRound)
	}
	want := map[string]time.Duration{"admission-0": 250 * time.Millisecond, "nats-server": 400 * time.Millisecond}
	if len(got.cpuBy) != len(want) {
		t.Fatalf("cpuBy = %v, want %v", got.cpuBy, want)
	}
	for name, d := range want {
		if got.cpuBy[name] != d {
			t.Errorf("cpuBy[%s] = %v, want %v", name, got.cpuBy[name], d)
		}
	}
}

// interleave spreads each side's submissions evenly over the round: the
// order is as given, and no side waits longer than its own spacing
// (rounded up) between two of its steps.
func TestInterleave(t *testing.T) {
	tests := []struct {
		name string
		n    []int
		want []int // nil: only the properties below
	}{
		{"two equal sides alternate", []int{3, 3}, []int{0, 1, 0, 1, 0, 1}},
		{"one side", []int{3}, []int{0, 0, 0}},
		{"two to one", []int{4, 2}, []int{0, 1, 0, 0, 1, 0}},
		{"an empty side", []int{2, 0}, []int{0, 0}},
		{"large and uneven", []int{600, 250, 7}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := interleave(tt.n)
			if tt.want != nil && !slices.Equal(got, tt.want) {
				t.Fatalf("interleave(%v) = %v, want %v", tt.n, got, tt.want)
			}
			total := 0
			for _, c := range tt.n {
				total += c
			}
			count := make([]int, len(tt.n))
			last := make([]int, len(tt.n))
			for i := range last {
				last[i] = -1
			}
			for step, s := range got {
				count[s]++
				// Spacing: total/n[s] steps on average; never more than
				// one step over it, rounded up.
				if gap, most := step-last[s], (total+tt.n[s]-1)/tt.n[s]+1; gap > most {
					t.Errorf("side %d waited %d steps before step %d, more than %d", s, gap, step, most)
				}
				last[s] = step
			}
			if len(got) != total || !slices.Equal(count, tt.n) {
				t.Errorf("interleave(%v): %d steps, counts %v", tt.n, len(got), count)
			}
		})
	}
}
