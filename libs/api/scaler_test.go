package api

import (
	"testing"
)

// TestScalerValidation: each bad Scaler is refused naming the field; a
// good one, defaulted, passes.
func TestScalerValidation(t *testing.T) {
	good := `{"apiVersion":"atoll.dev/v1","kind":"Scaler","metadata":{"project":"p","name":"s"},"spec":{"target":"web","maxReplicas":10,
"metrics":[{"type":"cpu","targetUtilization":50},{"type":"custom","name":"qps","targetPerPod":100,"onFailure":{"action":"fallback","replicas":4}}],
"schedules":[{"cron":"0 9 * * 1-5","timeZone":"Europe/Paris","replicas":6,"durationSeconds":3600}],
"behavior":{"tolerance":0.05,"cooldownSeconds":30,"scaleDown":{"stabilizationWindowSeconds":60,"policies":[{"type":"pods","value":2,"periodSeconds":30}]}}}}`
	w, err := Decode([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	w.Spec.Default()
	if fe := Validate(w); len(fe) > 0 {
		t.Fatalf("good Scaler refused: %v", fe)
	}
	s := w.Spec.(*ScalerSpec)
	if s.Min() != 1 || *s.Behavior.ScaleUp.StabilizationWindowSeconds != 0 || len(s.Behavior.ScaleUp.Policies) != 2 || s.Metrics[0].OnFailure.Action != FailureHold {
		t.Errorf("defaults: %+v", s)
	}
	if Placed(KindScaler) || !Placed(KindApp) {
		t.Error("a Scaler is not placed; an App is")
	}
	if DemandOf(w).Pods != 0 {
		t.Error("a Scaler reserves no pods")
	}
	cases := []struct{ name, spec, field string }{
		{"no target", `{"maxReplicas":3,"metrics":[{"type":"cpu","targetUtilization":50}]}`, "spec.target"},
		{"max below min", `{"target":"w","minReplicas":5,"maxReplicas":3,"metrics":[{"type":"cpu","targetUtilization":50}]}`, "spec.maxReplicas"},
		{"nothing to follow", `{"target":"w","maxReplicas":3}`, "spec.metrics"},
		{"bad type", `{"target":"w","maxReplicas":3,"metrics":[{"type":"gpu","targetUtilization":50}]}`, "spec.metrics[0].type"},
		{"utilization 0", `{"target":"w","maxReplicas":3,"metrics":[{"type":"memory"}]}`, "spec.metrics[0].targetUtilization"},
		{"two targets", `{"target":"w","maxReplicas":3,"metrics":[{"type":"custom","name":"q","targetPerPod":1,"targetTotal":5}]}`, "spec.metrics[0].targetPerPod"},
		{"custom named cpu", `{"target":"w","maxReplicas":3,"metrics":[{"type":"custom","name":"cpu","targetTotal":5}]}`, "spec.metrics[0].name"},
		{"duplicate", `{"target":"w","maxReplicas":3,"metrics":[{"type":"cpu","targetUtilization":50},{"type":"cpu","targetUtilization":60}]}`, "spec.metrics[1]"},
		{"bad failure", `{"target":"w","maxReplicas":3,"metrics":[{"type":"cpu","targetUtilization":50,"onFailure":{"action":"panic"}}]}`, "spec.metrics[0].onFailure.action"},
		{"bad cron", `{"target":"w","maxReplicas":3,"schedules":[{"cron":"every day","replicas":2,"durationSeconds":60}]}`, "spec.schedules[0].cron"},
		{"bad zone", `{"target":"w","maxReplicas":3,"schedules":[{"cron":"0 9 * * *","timeZone":"Mars/Olympus","replicas":2,"durationSeconds":60}]}`, "spec.schedules[0].timeZone"},
		{"no duration", `{"target":"w","maxReplicas":3,"schedules":[{"cron":"0 9 * * *","replicas":2}]}`, "spec.schedules[0].durationSeconds"},
		{"tolerance 1", `{"target":"w","maxReplicas":3,"metrics":[{"type":"cpu","targetUtilization":50}],"behavior":{"tolerance":1}}`, "spec.behavior.tolerance"},
		{"bad policy", `{"target":"w","maxReplicas":3,"metrics":[{"type":"cpu","targetUtilization":50}],"behavior":{"scaleUp":{"policies":[{"type":"pods","value":0,"periodSeconds":15}]}}}`, "spec.behavior.scaleUp.policies[0].value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := Decode([]byte(`{"apiVersion":"atoll.dev/v1","kind":"Scaler","metadata":{"project":"p","name":"s"},"spec":` + c.spec + `}`))
			if err != nil {
				t.Fatal(err)
			}
			fe := Validate(w)
			for _, e := range fe {
				if e.Field == c.field {
					return
				}
			}
			t.Errorf("errors %v, want one for %s", fe, c.field)
		})
	}
}
