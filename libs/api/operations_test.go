package api_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

func TestOperationValidate(t *testing.T) {
	three, neg := int32(3), int32(-1)
	tests := []struct {
		name string
		op   api.Operation
		want []string // field/code of every problem
	}{
		{"pause", api.Operation{Project: "p", Kind: "App", Name: "w", Op: api.OpPause}, nil},
		{"scale", api.Operation{Project: "p", Kind: "JobSet", Name: "w", Op: api.OpScale, Replicas: &three}, nil},
		{"restart container", api.Operation{Project: "p", Kind: "Pod", Name: "w", Op: api.OpRestartContainer, Container: "a"}, nil},
		{"unknown op", api.Operation{Project: "p", Kind: "App", Name: "w", Op: "explode"}, []string{"op/Unsupported"}},
		{"no op", api.Operation{Project: "p", Kind: "App", Name: "w"}, []string{"op/Required"}},
		{"scale without replicas", api.Operation{Project: "p", Kind: "App", Name: "w", Op: api.OpScale}, []string{"replicas/Required"}},
		{"negative replicas", api.Operation{Project: "p", Kind: "App", Name: "w", Op: api.OpScale, Replicas: &neg}, []string{"replicas/Invalid"}},
		{"restart-container without container", api.Operation{Project: "p", Kind: "App", Name: "w", Op: api.OpRestartContainer}, []string{"container/Required"}},
		{"stray fields", api.Operation{Project: "p", Kind: "App", Name: "w", Op: api.OpPause, Container: "a", Replicas: &three}, []string{"container/Invalid", "replicas/Invalid"}},
		{"bad ref", api.Operation{Project: "P", Kind: "Deployment", Op: api.OpStop}, []string{"project/Invalid", "kind/Unsupported", "name/Required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range tc.op.Validate() {
				got = append(got, f.Field+"/"+f.Code)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestControlRoundTripsAndStaysOutOfPlainDocuments(t *testing.T) {
	w, err := api.Decode([]byte(goodApp))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(w)
	if strings.Contains(string(b), "control") {
		t.Errorf("zero control marshalled: %s", b)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 123, time.UTC)
	w.Control = api.Control{Paused: true, RestartedAt: at, ContainerRestarts: map[string]time.Time{"app": at}}
	b, _ = json.Marshal(w)
	back, err := api.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w.Control, back.Control); diff != "" {
		t.Errorf("control (-want +got):\n%s", diff)
	}
	want := map[string]string{api.AnnoRestartedAt: "2025-03-01T12:00:00.000000123Z", "atoll.dev/restart.app": "2025-03-01T12:00:00.000000123Z"}
	if diff := cmp.Diff(want, back.Control.RestartAnnotations()); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if (api.Control{ContainerRestarts: map[string]time.Time{}}).IsZero() != true {
		t.Error("an empty restart map is not zero")
	}
}

func TestContainerRestartAnnotationFitsAKey(t *testing.T) {
	long := strings.Repeat("a", 50) + "-" + strings.Repeat("b", 12) // 63
	other := strings.Repeat("a", 50) + "-" + strings.Repeat("c", 12)
	for _, name := range []string{"app", strings.Repeat("x", 55), long, other} {
		k := api.ContainerRestartAnnotation(name)
		prefix, rest, _ := strings.Cut(k, "/")
		if prefix != "atoll.dev" || len(rest) > 63 || !strings.HasPrefix(rest, "restart.") || strings.HasSuffix(rest, "-") {
			t.Errorf("%s: key %q is not a valid annotation key", name, k)
		}
	}
	if api.ContainerRestartAnnotation(long) == api.ContainerRestartAnnotation(other) {
		t.Error("two long names share a key")
	}
	if got := api.ContainerRestartAnnotation("app"); got != "atoll.dev/restart.app" {
		t.Errorf("short name: %q", got)
	}
}
