package cli

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"atoll.dev/libs/computeapi"
)

// describeScaler writes a Scaler's recent decisions: a chart of the
// replicas and of each metric over time, then the last decisions with
// their reasons.
func describeScaler(out io.Writer, h []computeapi.ScalerDecision, err error, now time.Time) {
	fmt.Fprintln(out, "\nDecisions:")
	if err != nil {
		fmt.Fprintf(out, "  (history unavailable: %v)\n", err)
		return
	}
	if len(h) == 0 {
		fmt.Fprintln(out, "  (none yet)")
		return
	}
	fmt.Fprintf(out, "  from %s to %s (%d recorded)\n", clock(h[0].Time), clock(h[len(h)-1].Time), len(h))
	replicas := make([]float64, len(h))
	for i, d := range h {
		replicas[i] = float64(d.Desired)
	}
	fmt.Fprintf(out, "  %-10s %s\n", "replicas", sparkline(replicas))
	var metrics []string
	seen := map[string]bool{}
	for _, d := range h {
		for _, p := range d.Proposals {
			if !seen[p.Metric] {
				seen[p.Metric] = true
				metrics = append(metrics, p.Metric)
			}
		}
	}
	for _, m := range metrics {
		vals := make([]float64, len(h))
		for i, d := range h {
			vals[i] = math.NaN()
			for _, p := range d.Proposals {
				if p.Metric == m && (p.State == "ok" || p.State == "within-tolerance") {
					vals[i] = p.Value
				}
			}
		}
		fmt.Fprintf(out, "  %-10s %s\n", m, sparkline(vals))
	}
	tw := newTable(out)
	fmt.Fprintln(tw, "  TIME\tREPLICAS\tFLOOR\tMETRICS\tOUTCOME\tREASON")
	from := max(0, len(h)-15)
	for _, d := range h[from:] {
		var ms []string
		for _, p := range d.Proposals {
			switch p.State {
			case "failed-hold", "failed-fallback":
				ms = append(ms, fmt.Sprintf("%s %s->%d", p.Metric, p.State, p.Replicas))
			default:
				ms = append(ms, fmt.Sprintf("%s %.4g/%.4g->%d", p.Metric, p.Value, p.Target, p.Replicas))
			}
		}
		floor := "-"
		if d.Floor > 0 {
			floor = fmt.Sprintf("%d (%s)", d.Floor, d.FloorSchedule)
		}
		outcome := string(d.Outcome)
		if d.Detail != "" && d.Outcome == "refused" {
			outcome += ": " + d.Detail
		}
		fmt.Fprintf(tw, "  %s\t%d -> %d\t%s\t%s\t%s\t%s\n", clock(d.Time), d.Current, d.Desired, floor,
			orDash(strings.Join(ms, ", ")), outcome, d.Reason)
	}
	_ = tw.Flush()
	_ = now
}

// sparkline draws values as bars scaled from 0 to their max, with the
// range after it; NaN (no sample) is a space.
func sparkline(vals []float64) string {
	const bars = "▁▂▃▄▅▆▇█"
	blocks := []rune(bars)
	hi, lo := math.Inf(-1), math.Inf(1)
	for _, v := range vals {
		if !math.IsNaN(v) {
			hi, lo = math.Max(hi, v), math.Min(lo, v)
		}
	}
	if math.IsInf(hi, -1) {
		return "(no samples)"
	}
	var b strings.Builder
	for _, v := range vals {
		switch {
		case math.IsNaN(v):
			b.WriteRune(' ')
		case hi <= 0:
			b.WriteRune(blocks[0])
		default:
			b.WriteRune(blocks[int(math.Round(v/hi*float64(len(blocks)-1)))])
		}
	}
	return fmt.Sprintf("%s  %.4g..%.4g", b.String(), lo, hi)
}
