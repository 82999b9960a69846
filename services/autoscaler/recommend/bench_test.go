package recommend

import (
	"fmt"
	"testing"
	"time"

	"atoll.dev/libs/api"
)

// BenchmarkEvaluate10000 evaluates 10,000 Scalers (cpu and a custom
// metric, a schedule in a time zone, a full 300 s down window of history
// at 15 s) with live samples, and reports evaluations per second.
//
//	go test -run '^$' -bench Evaluate10000 ./services/autoscaler/recommend
func BenchmarkEvaluate10000(b *testing.B) {
	const n = 10000
	ins := make([]Input, n)
	for i := range ins {
		s := spec(func(s *api.ScalerSpec) {
			s.MaxReplicas = 100
			s.Metrics = append(s.Metrics, api.ScalerMetric{Type: api.MetricCustom, Name: "qps", TargetPerPod: 100})
			s.Schedules = []api.ScalerSchedule{{Name: fmt.Sprint(i), Cron: "0 9 * * 1-5", TimeZone: "Europe/Paris", Replicas: 6, DurationSeconds: 3600}}
		})
		var h History
		for k := range 20 {
			h.Recommendations = append(h.Recommendations, Recommendation{At: t0.Add(-time.Duration(k*15) * time.Second), Replicas: int32(3 + k%4)})
		}
		h.Changes = []Change{{At: t0.Add(-10 * time.Second), From: 3, To: 5}}
		ins[i] = Input{Spec: s, Current: 5, Ready: 5, History: h, Now: t0, Samples: map[string]Sample{
			"cpu": {Value: float64(20 + i%200), Pods: 5, At: t0.Add(-5 * time.Second)},
			"qps": {Value: float64(i % 1000), At: t0.Add(-3 * time.Second)},
		}}
	}
	b.ReportAllocs()
	start := time.Now()
	evals := 0
	for b.Loop() {
		for i := range ins {
			_ = Evaluate(ins[i])
		}
		evals += n
	}
	b.ReportMetric(float64(evals)/time.Since(start).Seconds(), "evals/s")
}
