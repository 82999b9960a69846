package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

const goodApp = `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"search","name":"web"},
 "spec":{"replicas":3,"template":{"containers":[{"name":"app","image":"nginx:1.27"}]}}}`

func TestDecodeDefaultsAndDemand(t *testing.T) {
	w, err := api.Decode([]byte(goodApp))
	if err != nil {
		t.Fatal(err)
	}
	w.Spec.Default()
	if fe := api.Validate(w); len(fe) > 0 {
		t.Fatalf("valid app rejected: %v", fe)
	}
	got := api.DemandOf(w)
	want := api.Demand{Tier: api.TierOnDemand, MilliCPU: 300, MemoryBytes: 3 * 128 << 20, Pods: 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("demand (-want +got):\n%s", diff)
	}
	if w.Key() != "search.app.web" {
		t.Errorf("key %q", w.Key())
	}
	p, k, n, err := api.ParseKey(w.Key())
	if err != nil || p != "search" || k != "App" || n != "web" {
		t.Errorf("ParseKey = %q %q %q %v", p, k, n, err)
	}
}

// BadSpecs are documents each rejected with the given field and code. The
// admission tests submit the same documents end to end.
var BadSpecs = []struct {
	Name, Doc, Field, Code string
}{
	{"bad name", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"Web_1"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "metadata.name", api.CodeInvalid},
	{"name too long", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"` + strings.Repeat("a", 64) + `"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "metadata.name", api.CodeInvalid},
	{"missing name", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "metadata.name", api.CodeRequired},
	{"bad project", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"P!","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "metadata.project", api.CodeInvalid},
	{"negative replicas", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"replicas":-1,"template":{"containers":[{"name":"a","image":"x"}]}}}`, "spec.replicas", api.CodeInvalid},
	{"missing image", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a"}]}}}`, "spec.template.containers[0].image", api.CodeRequired},
	{"empty containers", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[]}}}`, "spec.template.containers", api.CodeRequired},
	{"absurd cpu", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","resources":{"requests":{"cpu":"100000"}}}]}}}`, "spec.template.containers[0].resources.requests.cpu", api.CodeTooLarge},
	{"absurd memory", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","resources":{"requests":{"memory":"900Pi"}}}]}}}`, "spec.template.containers[0].resources.requests.memory", api.CodeTooLarge},
	{"not a quantity", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","resources":{"requests":{"cpu":"lots"}}}]}}}`, "spec.template.containers[0].resources.requests.cpu", api.CodeInvalid},
	{"unknown field", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"replicaz":3,"template":{"containers":[{"name":"a","image":"x"}]}}}`, "spec.replicaz", api.CodeUnknown},
	{"wrong type", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"replicas":"three","template":{"containers":[{"name":"a","image":"x"}]}}}`, "spec.replicas", api.CodeType},
	{"unknown kind", `{"apiVersion":"atoll.dev/v1","kind":"VM","metadata":{"project":"p","name":"w"},"spec":{}}`, "kind", api.CodeUnsupported},
	{"bad tier", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"tier":"Gold","template":{"containers":[{"name":"a","image":"x"}]}}}`, "spec.tier", api.CodeUnsupported},
	{"bad port", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","ports":[{"containerPort":70000}]}]}}}`, "spec.template.containers[0].ports[0].containerPort", api.CodeInvalid},
	{"duplicate container", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x"},{"name":"a","image":"y"}]}}}`, "spec.template.containers[1].name", api.CodeDuplicate},
	{"parallelism over completions", `{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"project":"p","name":"j"},"spec":{"parallelism":8,"completions":4,"template":{"containers":[{"name":"a","image":"x"}]}}}`, "spec.parallelism", api.CodeInvalid},
	{"request above limit", `{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","resources":{"requests":{"cpu":"2"},"limits":{"cpu":"1"}}}]}}}`, "spec.template.containers[0].resources.requests.cpu", api.CodeInvalid},
	{"wrong api version", `{"apiVersion":"v2","kind":"Pod","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "apiVersion", api.CodeUnsupported},
	{"malformed json", `{"apiVersion":`, "", api.CodeInvalid},
}

func TestBadSpecsNameFieldAndReason(t *testing.T) {
	for _, tc := range BadSpecs {
		t.Run(tc.Name, func(t *testing.T) {
			fe := decodeAndValidate(tc.Doc)
			if len(fe) == 0 {
				t.Fatal("accepted")
			}
			found := false
			for _, e := range fe {
				if e.Field == tc.Field && e.Code == tc.Code && e.Reason != "" {
					found = true
				}
			}
			if !found {
				t.Errorf("errors %+v lack field %q code %q", fe, tc.Field, tc.Code)
			}
		})
	}
}

func TestAllErrorsReportedAtOnce(t *testing.T) {
	doc := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"Bad"},"spec":{"replicas":-2,"tier":"x","template":{"containers":[{"name":"a"}]}}}`
	fe := decodeAndValidate(doc)
	var fields []string
	for _, e := range fe {
		fields = append(fields, e.Field)
	}
	want := []string{"metadata.name", "spec.tier", "spec.template.containers[0].image", "spec.replicas"}
	if diff := cmp.Diff(want, fields); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
}

func decodeAndValidate(doc string) api.FieldErrors {
	w, err := api.Decode([]byte(doc))
	if err != nil {
		var fe api.FieldErrors
		if !errors.As(err, &fe) {
			return api.FieldErrors{{Reason: err.Error()}}
		}
		return fe
	}
	w.Spec.Default()
	return api.Validate(w)
}
