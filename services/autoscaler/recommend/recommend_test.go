package recommend

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func i32(v int32) *int32 { return &v }

// spec returns a defaulted Scaler spec of 1..20 replicas with a CPU
// target of 50%, changed by opts.
func spec(opts ...func(*api.ScalerSpec)) *api.ScalerSpec {
	s := &api.ScalerSpec{Target: "web", MinReplicas: i32(1), MaxReplicas: 20,
		Metrics: []api.ScalerMetric{{Type: api.MetricCPU, TargetUtilization: 50}}}
	for _, o := range opts {
		o(s)
	}
	s.Default()
	if fe := s.Validate(); len(fe) > 0 {
		panic(fe)
	}
	return s
}

func cpu(v float64, pods int32, at time.Time) map[string]Sample {
	return map[string]Sample{"cpu": {Value: v, Pods: pods, At: at}}
}

// noWindows turns stabilization and rate limits off, to see the
// arithmetic alone.
func noWindows(s *api.ScalerSpec) {
	s.Behavior.ScaleDown = &api.ScalingRules{StabilizationWindowSeconds: i32(0)}
	s.Behavior.ScaleUp = &api.ScalingRules{StabilizationWindowSeconds: i32(0), Policies: []api.RatePolicy{{Type: api.RatePods, Value: 1000, PeriodSeconds: 15}}}
	s.Behavior.ScaleDown.Policies = []api.RatePolicy{{Type: api.RatePercent, Value: 100, PeriodSeconds: 15}}
}

func TestArithmetic(t *testing.T) {
	custom := func(perPod, total float64, fail *api.FailurePolicy) func(*api.ScalerSpec) {
		return func(s *api.ScalerSpec) {
			s.Metrics = append(s.Metrics, api.ScalerMetric{Type: api.MetricCustom, Name: "qps", TargetPerPod: perPod, TargetTotal: total, OnFailure: fail})
		}
	}
	cases := []struct {
		name    string
		spec    *api.ScalerSpec
		current int32
		ready   int32
		samples map[string]Sample
		want    int32
		states  []string
	}{
		{"150% of 50% on 3 pods is 9", spec(noWindows), 3, 3, cpu(150, 3, t0), 9, []string{StateOK}},
		{"within tolerance above", spec(noWindows), 3, 3, cpu(54, 3, t0), 3, []string{StateTolerance}},
		{"within tolerance below", spec(noWindows), 10, 10, cpu(45.5, 10, t0), 10, []string{StateTolerance}},
		{"just outside tolerance scales", spec(noWindows), 10, 10, cpu(56, 10, t0), 12, []string{StateOK}},
		{"ceil of ratio times pods", spec(noWindows), 4, 4, cpu(60, 4, t0), 5, []string{StateOK}},
		{"scale down", spec(noWindows), 9, 9, cpu(10, 9, t0), 2, []string{StateOK}},
		{"clamped to max", spec(noWindows), 10, 10, cpu(500, 10, t0), 20, []string{StateOK}},
		{"clamped to min", spec(noWindows, func(s *api.ScalerSpec) { s.MinReplicas = i32(3) }), 6, 6, cpu(1, 6, t0), 3, []string{StateOK}},
		{"above max comes down to max", spec(noWindows, func(s *api.ScalerSpec) { s.MaxReplicas = 5 }), 8, 8, cpu(50, 8, t0), 5, []string{StateTolerance}},
		// Missing pods: 2 of 4 measured at 100%: on scale-up the missing
		// count as 0, so (200+0)/4 = 50% is on target: no change.
		{"missing pods count 0 on scale-up", spec(noWindows), 4, 4, cpu(100, 2, t0), 4, []string{StateTolerance}},
		// 2 of 4 measured at 10%: on scale-down the missing count as 100%:
		// (20+200)/4 = 55% flips to above target: no change.
		{"missing pods count 100% on scale-down", spec(noWindows), 4, 4, cpu(10, 2, t0), 4, []string{StateOK}},
		// 3 of 4 at 200%: (600+0)/4 = 150% -> ceil(3 x 4) = 12.
		{"missing pods scale-up recomputed", spec(noWindows), 4, 4, cpu(200, 3, t0), 12, []string{StateOK}},
		{"max over metrics: custom per pod wins", spec(noWindows, custom(10, 0, nil)), 3, 3,
			map[string]Sample{"cpu": {Value: 60, Pods: 3, At: t0}, "qps": {Value: 120, At: t0}}, 12, []string{StateOK, StateOK}},
		{"max over metrics: cpu wins", spec(noWindows, custom(10, 0, nil)), 3, 3,
			map[string]Sample{"cpu": {Value: 200, Pods: 3, At: t0}, "qps": {Value: 20, At: t0}}, 12, []string{StateOK, StateOK}},
		{"custom total target", spec(noWindows, func(s *api.ScalerSpec) { s.Metrics = nil }, custom(0, 100, nil)), 4, 4,
			map[string]Sample{"qps": {Value: 300, At: t0}}, 12, []string{StateOK}},
		{"failed metric holds against a scale-down", spec(noWindows, custom(10, 0, nil)), 6, 6,
			map[string]Sample{"cpu": {Value: 10, Pods: 6, At: t0}}, 6, []string{StateOK, StateHold}},
		{"failed metric does not stop a scale-up", spec(noWindows, custom(10, 0, nil)), 3, 3,
			map[string]Sample{"cpu": {Value: 150, Pods: 3, At: t0}}, 9, []string{StateOK, StateHold}},
		{"stale sample is a failure", spec(noWindows), 3, 3, cpu(150, 3, t0.Add(-2*time.Minute)), 3, []string{StateHold}},
		{"fallback when the metric fails", spec(noWindows, func(s *api.ScalerSpec) {
			s.Metrics[0].OnFailure = &api.FailurePolicy{Action: api.FailureFallback, Replicas: 7}
		}), 3, 3, nil, 7, []string{StateFallback}},
		{"fallback never lower than a healthy metric", spec(noWindows, custom(10, 0, &api.FailurePolicy{Action: api.FailureFallback, Replicas: 4})), 3, 3,
			map[string]Sample{"cpu": {Value: 150, Pods: 3, At: t0}}, 9, []string{StateOK, StateFallback}},
		{"fallback never lower than a schedule", spec(noWindows, func(s *api.ScalerSpec) {
			s.Metrics[0].OnFailure = &api.FailurePolicy{Action: api.FailureFallback, Replicas: 2}
			s.Schedules = []api.ScalerSchedule{{Name: "peak", Cron: "0 10 * * *", Replicas: 6, DurationSeconds: 3600}}
		}), 3, 3, nil, 6, []string{StateFallback}},
		{"schedule floor over a low metric", spec(noWindows, func(s *api.ScalerSpec) {
			s.Schedules = []api.ScalerSchedule{{Name: "peak", Cron: "0 10 * * *", Replicas: 6, DurationSeconds: 3600}}
		}), 3, 3, cpu(1, 3, t0), 6, []string{StateOK}},
		{"metric over the schedule floor", spec(noWindows, func(s *api.ScalerSpec) {
			s.Schedules = []api.ScalerSchedule{{Name: "peak", Cron: "0 10 * * *", Replicas: 6, DurationSeconds: 3600}}
		}), 3, 3, cpu(200, 3, t0), 12, []string{StateOK}},
		{"schedule closed: min", spec(noWindows, func(s *api.ScalerSpec) {
			s.Schedules = []api.ScalerSchedule{{Name: "night", Cron: "0 22 * * *", Replicas: 6, DurationSeconds: 3600}}
		}), 3, 3, cpu(1, 3, t0), 1, []string{StateOK}},
		{"schedule in a time zone", spec(noWindows, func(s *api.ScalerSpec) {
			// 10:00 UTC is 11:00 in Paris in November.
			s.Schedules = []api.ScalerSchedule{{Cron: "0 11 * * *", TimeZone: "Europe/Paris", Replicas: 5, DurationSeconds: 600}}
		}), 3, 3, cpu(50, 3, t0), 5, []string{StateTolerance}},
		{"schedules only", spec(noWindows, func(s *api.ScalerSpec) {
			s.Metrics = nil
			s.Schedules = []api.ScalerSchedule{{Cron: "0 10 * * *", Replicas: 4, DurationSeconds: 60}}
		}), 1, 1, nil, 4, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Evaluate(Input{Spec: c.spec, Current: c.current, Ready: c.ready, Samples: c.samples, Now: t0})
			if d.Desired != c.want {
				t.Errorf("desired %d, want %d (%s)", d.Desired, c.want, d.Reason)
			}
			var states []string
			for _, p := range d.Proposals {
				states = append(states, p.State)
			}
			if diff := cmp.Diff(c.states, states); diff != "" {
				t.Errorf("states (-want +got):\n%s", diff)
			}
			if d.Reason == "" {
				t.Error("no reason")
			}
		})
	}
}

// sim runs a Scaler against a metric for a while, evaluating every step,
// and returns the replicas after each evaluation. The App follows the
// decision at once; usage is in cores for the whole App, spread on its
// pods, so utilization falls as replicas rise.
func sim(s *api.ScalerSpec, start int32, step time.Duration, steps int, load func(i int, now time.Time) float64) []int32 {
	var h History
	cur := start
	out := make([]int32, 0, steps)
	for i := range steps {
		now := t0.Add(time.Duration(i) * step)
		util := load(i, now) / float64(cur) // percent per pod
		d := Evaluate(Input{Spec: s, Current: cur, Ready: cur, Samples: cpu(util, cur, now), History: h, Now: now})
		h = Record(s, h, d, d.Changed())
		cur = d.Desired
		out = append(out, cur)
	}
	return out
}

// changes counts changes of direction in a series.
func reversals(xs []int32) int {
	n, dir := 0, 0
	for i := 1; i < len(xs); i++ {
		d := 0
		switch {
		case xs[i] > xs[i-1]:
			d = 1
		case xs[i] < xs[i-1]:
			d = -1
		}
		if d != 0 && dir != 0 && d != dir {
			n++
		}
		if d != 0 {
			dir = d
		}
	}
	return n
}

// TestNoFlappingUnderASineWave: a load oscillating with a 2-minute period
// would move the replicas up and down every few evaluations without
// stabilization; with the default 300 s down window they rise to cover the
// peaks and stay.
func TestNoFlappingUnderASineWave(t *testing.T) {
	load := func(i int, now time.Time) float64 {
		return 300 + 200*math.Sin(2*math.Pi*now.Sub(t0).Seconds()/120) // 100..500 percent-pods
	}
	stable := sim(spec(), 4, 15*time.Second, 80, load)
	if r := reversals(stable); r != 0 {
		t.Errorf("stabilized replicas reversed %d times: %v", r, stable)
	}
	if m := stable[len(stable)-1]; m != 10 {
		t.Errorf("settled at %d, want 10 (the peak's 500/50)", m)
	}
	// The same load without windows flaps: the test can fail.
	flappy := sim(spec(noWindows), 4, 15*time.Second, 80, load)
	if r := reversals(flappy); r < 5 {
		t.Errorf("without windows only %d reversals: %v; the sine does not exercise stabilization", r, flappy)
	}
}

// TestScaleDownWaitsForTheWindow: after load drops, replicas stay until
// the down window has passed, then drop at once.
func TestScaleDownWaitsForTheWindow(t *testing.T) {
	s := spec(func(s *api.ScalerSpec) {
		s.Behavior.ScaleDown = &api.ScalingRules{StabilizationWindowSeconds: i32(60)}
	})
	got := sim(s, 9, 10*time.Second, 12, func(i int, _ time.Time) float64 {
		if i < 3 {
			return 450 // 9 pods at 50%
		}
		return 150 // 3 pods' worth
	})
	// The last 9-recommendation is at step 2 (t=20s): it is out of the
	// 60 s window at t=80s, so the first drop is at step 8.
	want := []int32{9, 9, 9, 9, 9, 9, 9, 9, 3, 3, 3, 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replicas (-want +got):\n%s", diff)
	}
}

func TestRatePolicies(t *testing.T) {
	cases := []struct {
		name  string
		up    *api.ScalingRules
		down  *api.ScalingRules
		start int32
		load  float64 // percent-pods, constant
		want  []int32
	}{
		{"default up: max(4 pods, 100%) per 15 s", nil, nil, 2, 2000, []int32{6, 12, 20, 20}},
		{"pods per period", &api.ScalingRules{Policies: []api.RatePolicy{{Type: api.RatePods, Value: 2, PeriodSeconds: 30}}}, nil, 2, 2000,
			// 15 s steps, 30 s period: +2 per two steps.
			[]int32{4, 4, 6, 6, 8}},
		{"percent per period", &api.ScalingRules{Policies: []api.RatePolicy{{Type: api.RatePercent, Value: 50, PeriodSeconds: 15}}}, nil, 2, 2000,
			[]int32{3, 5, 8, 12, 18}},
		{"min of policies", &api.ScalingRules{SelectPolicy: "min", Policies: []api.RatePolicy{{Type: api.RatePods, Value: 1, PeriodSeconds: 15}, {Type: api.RatePercent, Value: 100, PeriodSeconds: 15}}}, nil, 2, 2000,
			[]int32{3, 4, 5, 6}},
		{"scale-up disabled", &api.ScalingRules{SelectPolicy: "disabled"}, nil, 2, 2000, []int32{2, 2, 2}},
		{"scale-down 1 pod per period", nil, &api.ScalingRules{StabilizationWindowSeconds: i32(0), Policies: []api.RatePolicy{{Type: api.RatePods, Value: 1, PeriodSeconds: 15}}}, 8, 50,
			[]int32{7, 6, 5, 4, 3, 2, 1, 1}},
		{"scale-down 50% per period", nil, &api.ScalingRules{StabilizationWindowSeconds: i32(0), Policies: []api.RatePolicy{{Type: api.RatePercent, Value: 50, PeriodSeconds: 15}}}, 16, 50,
			[]int32{8, 4, 2, 1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := spec(func(s *api.ScalerSpec) { s.Behavior.ScaleUp, s.Behavior.ScaleDown = c.up, c.down })
			got := sim(s, c.start, 15*time.Second, len(c.want), func(int, time.Time) float64 { return c.load })
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("replicas (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCooldown: after a change nothing moves for the cooldown, except up
// to an open schedule's floor and into [min, max].
func TestCooldown(t *testing.T) {
	s := spec(noWindows, func(s *api.ScalerSpec) { s.Behavior.CooldownSeconds = 60 })
	got := sim(s, 3, 15*time.Second, 8, func(i int, _ time.Time) float64 {
		if i < 1 {
			return 300 // 6 pods' worth
		}
		return 1000 // 20 pods' worth
	})
	// 3 -> 6 at t=0; the rise to 20 waits until t=60s.
	want := []int32{6, 6, 6, 6, 20, 20, 20, 20}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replicas (-want +got):\n%s", diff)
	}

	h := History{Changes: []Change{{At: t0.Add(-10 * time.Second), From: 2, To: 3}}}
	floor := spec(noWindows, func(s *api.ScalerSpec) {
		s.Behavior.CooldownSeconds = 60
		s.Schedules = []api.ScalerSchedule{{Name: "peak", Cron: "0 10 * * *", Replicas: 6, DurationSeconds: 600}}
	})
	d := Evaluate(Input{Spec: floor, Current: 3, Ready: 3, Samples: cpu(200, 3, t0), History: h, Now: t0})
	if d.Desired != 6 || d.Limited == "" {
		t.Errorf("in a cooldown with a floor of 6 and load for 12: desired %d limited %q, want 6 by the cooldown", d.Desired, d.Limited)
	}
	minimum := spec(noWindows, func(s *api.ScalerSpec) { s.Behavior.CooldownSeconds = 60; s.MinReplicas = i32(4) })
	if d := Evaluate(Input{Spec: minimum, Current: 3, Ready: 3, Samples: cpu(50, 3, t0), History: h, Now: t0}); d.Desired != 4 {
		t.Errorf("in a cooldown below min: desired %d, want 4", d.Desired)
	}
}

// TestScheduleWindow: a floor holds while the window is open, with no
// load, and the replicas go back to min after the window and the down
// window.
func TestScheduleWindow(t *testing.T) {
	s := spec(func(s *api.ScalerSpec) {
		s.Behavior.ScaleDown = &api.ScalingRules{StabilizationWindowSeconds: i32(30)}
		s.Schedules = []api.ScalerSchedule{{Name: "batch", Cron: "1 10 * * *", Replicas: 6, DurationSeconds: 60}}
	})
	// 10 s steps from 10:00:00: the window is [10:01:00, 10:02:00).
	got := sim(s, 1, 10*time.Second, 20, func(int, time.Time) float64 { return 0 })
	// The last 6 is recommended at step 11 (t=110s), out of the 30 s down
	// window at step 14.
	want := []int32{1, 1, 1, 1, 1, 1, 6, 6, 6, 6, 6, 6, 6, 6, 1, 1, 1, 1, 1, 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replicas (-want +got):\n%s", diff)
	}
}

func TestOpen(t *testing.T) {
	cases := []struct {
		cron string
		tz   string
		dur  int32
		at   time.Time
		want bool
	}{
		{"0 10 * * *", "", 60, t0, true},
		{"0 10 * * *", "", 60, t0.Add(59 * time.Second), true},
		{"0 10 * * *", "", 60, t0.Add(60 * time.Second), false},
		{"0 10 * * *", "", 60, t0.Add(-time.Second), false},
		{"0 11 * * *", "Europe/Paris", 60, t0, true},
		{"0 10 * * *", "Europe/Paris", 60, t0, false},
		{"*/5 * * * *", "", 30, t0.Add(5*time.Minute + 10*time.Second), true},
		{"not a cron", "", 30, t0, false},
	}
	for _, c := range cases {
		if got := NewSchedules(4).Open(api.ScalerSchedule{Cron: c.cron, TimeZone: c.tz, DurationSeconds: c.dur, Replicas: 1}, c.at); got != c.want {
			t.Errorf("Open(%q %s %ds, %s) = %v, want %v", c.cron, c.tz, c.dur, c.at.Format(time.TimeOnly), got, c.want)
		}
	}
}

// TestDeterministic: the decision is a pure function of its input.
func TestDeterministic(t *testing.T) {
	in := Input{Spec: spec(), Current: 3, Ready: 3, Samples: cpu(150, 3, t0), Now: t0,
		History: History{Recommendations: []Recommendation{{At: t0.Add(-time.Minute), Replicas: 5}}}}
	a, b := Evaluate(in), Evaluate(in)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("two evaluations differ (-a +b):\n%s", diff)
	}
}

// TestSchedulesAreBounded: the parsed crons kept are at most the size, the
// least recently used going first, and one parsed again is the same.
func TestSchedulesAreBounded(t *testing.T) {
	c := NewSchedules(2)
	at := time.Date(2026, 1, 5, 9, 0, 30, 0, time.UTC) // a Monday, 09:00:30
	for _, expr := range []string{"0 9 * * *", "0 9 * * 1", "0 9 * * 1-5", "0 9 * * *"} {
		if !c.Open(api.ScalerSchedule{Cron: expr, DurationSeconds: 60, Replicas: 1}, at) {
			t.Errorf("%q not open at %s", expr, at)
		}
		if c.Len() > 2 {
			t.Fatalf("%d parsed crons kept, want at most 2", c.Len())
		}
	}
	if c.Len() != 2 {
		t.Errorf("%d parsed crons kept, want 2", c.Len())
	}
}
