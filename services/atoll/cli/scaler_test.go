package cli

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/computeapi"
)

func TestSparkline(t *testing.T) {
	cases := []struct {
		in   []float64
		want string
	}{
		{[]float64{3, 3, 9, 9, 3}, "▃▃██▃  3..9"},
		{[]float64{0, math.NaN(), 8}, "▁ █  0..8"},
		{[]float64{math.NaN()}, "(no samples)"},
	}
	for _, c := range cases {
		if got := sparkline(c.in); got != c.want {
			t.Errorf("sparkline(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestDescribeScaler: the history shows the replicas and each metric as
// charts, and each decision's outcome and reason.
func TestDescribeScaler(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	h := []computeapi.ScalerDecision{
		{Time: at, Current: 3, Desired: 3, Outcome: "none", Reason: "metric cpu 50 of target 50 is within tolerance: 3",
			Proposals: []computeapi.MetricProposal{{Metric: "cpu", Value: 50, Target: 50, Replicas: 3, State: "within-tolerance"}}},
		{Time: at.Add(15 * time.Second), Current: 3, Desired: 9, Outcome: "scaled", Reason: "metric cpu 150 of target 50 (ratio 3) asks 9",
			Proposals: []computeapi.MetricProposal{{Metric: "cpu", Value: 150, Target: 50, Replicas: 9, State: "ok"}}},
		{Time: at.Add(30 * time.Second), Current: 9, Desired: 12, Outcome: "refused", Detail: "QuotaExceeded: pods", Reason: "metric cpu asks 12",
			Proposals: []computeapi.MetricProposal{{Metric: "cpu", State: "failed-hold", Replicas: 9}}},
	}
	var b bytes.Buffer
	describeScaler(&b, h, nil, at)
	out := b.String()
	for _, want := range []string{"replicas", "cpu", "3 -> 9", "scaled", "refused: QuotaExceeded: pods", "cpu failed-hold->9", "ratio 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
}
