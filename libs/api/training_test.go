package api

import (
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func trainingJob(spec string) string {
	return `{"apiVersion":"atoll.dev/v1","kind":"TrainingJob","metadata":{"project":"ml","name":"resnet"},"spec":{` + spec +
		`"template":{"containers":[{"name":"t","image":"t:1","resources":{"requests":{"cpu":"500m","memory":"1Gi","nvidia.com/gpu":2}}}]}}}`
}

func TestTrainingJobDefaultsAndDemand(t *testing.T) {
	w, err := Decode([]byte(trainingJob(`"workers":4,`)))
	if err != nil {
		t.Fatal(err)
	}
	w.Spec.Default()
	if fe := Validate(w); len(fe) > 0 {
		t.Fatalf("valid TrainingJob refused: %v", fe)
	}
	s := w.Spec.(*TrainingJobSpec)
	policy, most := s.Policy()
	got := []any{s.MasterPort, s.ReadyTimeoutSeconds, s.Backoff.BaseSeconds, s.Backoff.MaxSeconds, policy, most}
	want := []any{int32(29500), int32(300), int32(10), int32(600), GangFail, int32(3)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	d := DemandOf(w)
	if diff := cmp.Diff(Demand{Tier: TierOnDemand, MilliCPU: 2000, MemoryBytes: 4 << 30, GPUs: 8, Pods: 4}, d); diff != "" {
		t.Errorf("demand is workers x pod requests (-want +got):\n%s", diff)
	}
}

func TestTrainingJobValidation(t *testing.T) {
	tests := []struct {
		name  string
		spec  string
		field string // "" means valid
		code  string
	}{
		{"valid", `"workers":2,`, "", ""},
		{"workers required", ``, "spec.workers", CodeRequired},
		{"workers negative", `"workers":-1,`, "spec.workers", CodeInvalid},
		{"workers too many", `"workers":1001,`, "spec.workers", CodeInvalid},
		{"port out of range", `"workers":2,"masterPort":70000,`, "spec.masterPort", CodeInvalid},
		{"timeout negative", `"workers":2,"readyTimeoutSeconds":-5,`, "spec.readyTimeoutSeconds", CodeInvalid},
		{"backoff max below base", `"workers":2,"backoff":{"baseSeconds":30,"maxSeconds":10},`, "spec.backoff.maxSeconds", CodeInvalid},
		{"unknown policy", `"workers":2,"failurePolicy":{"policy":"Retry"},`, "spec.failurePolicy.policy", CodeUnsupported},
		{"restarts out of range", `"workers":2,"failurePolicy":{"policy":"RestartGang","maxRestarts":101},`, "spec.failurePolicy.maxRestarts", CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := Decode([]byte(trainingJob(tt.spec)))
			if err != nil {
				t.Fatal(err)
			}
			w.Spec.Default() // as admission does
			var got []string
			for _, e := range Validate(w) {
				got = append(got, e.Field+" "+e.Code)
			}
			var want []string
			if tt.field != "" {
				want = []string{tt.field + " " + tt.code}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("field errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTrainingJobRefusesPlatformEnv(t *testing.T) {
	w, err := Decode([]byte(`{"apiVersion":"atoll.dev/v1","kind":"TrainingJob","metadata":{"project":"ml","name":"x"},"spec":{"workers":2,
"template":{"containers":[{"name":"t","image":"t:1","env":[{"name":"RANK","value":"3"}]}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	w.Spec.Default()
	fe := Validate(w)
	if len(fe) != 1 || fe[0].Field != "spec.template.containers" {
		t.Errorf("field errors %v, want one on spec.template.containers naming RANK", fe)
	}
}

func TestTrainingJobBackoffIsExponentialAndCapped(t *testing.T) {
	s := &TrainingJobSpec{Backoff: &GangBackoff{BaseSeconds: 10, MaxSeconds: 60}}
	var got []time.Duration
	for n := int32(1); n <= 5; n++ {
		got = append(got, s.BackoffFor(n))
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 60 * time.Second, 60 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backoff per requeue (-want +got):\n%s", diff)
	}
}

// TestTrainingJobExample: the example in deploy/examples decodes and is valid.
func TestTrainingJobExample(t *testing.T) {
	b, err := os.ReadFile("../../deploy/examples/training.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w, err := DecodeYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	w.Spec.Default()
	if fe := Validate(w); len(fe) > 0 {
		t.Fatalf("deploy/examples/training.yaml: %v", fe)
	}
	if p, n := w.Spec.(*TrainingJobSpec).Policy(); p != GangRestart || n != 2 {
		t.Errorf("policy %s/%d, want RestartGang/2", p, n)
	}
}
