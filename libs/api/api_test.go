package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/libs/api/apitest"
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

func TestBadSpecsNameFieldAndReason(t *testing.T) {
	for _, tc := range apitest.BadSpecs {
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

func TestTypeErrorPathHasNoGoNames(t *testing.T) {
	_, err := api.Decode([]byte(`{"kind":"App","metadata":{"name":"x"},"spec":{"template":{"containers":[{"name":"c","image":"i","args":"one"}]}}}`))
	var fe api.FieldErrors
	if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Field != "spec.template.containers.args" || fe[0].Code != api.CodeType {
		t.Fatalf("got %v", err)
	}
}

func TestPodRequestsCountsSidecarsLikeKubernetes(t *testing.T) {
	c := func(cpu, mem string, gpu int64) api.Container {
		return api.Container{Name: "c", Image: "i", Resources: api.Resources{Requests: api.ResourceList{CPU: cpu, Memory: mem, GPU: gpu}}}
	}
	for _, tc := range []struct {
		name string
		t    api.PodTemplate
		want api.Quantities
	}{
		{"containers add up", api.PodTemplate{Containers: []api.Container{c("100m", "64Mi", 0), c("200m", "64Mi", 0)}}, api.Quantities{MilliCPU: 300, MemoryBytes: 128 << 20}},
		{"sidecars run beside the containers", api.PodTemplate{Containers: []api.Container{c("100m", "64Mi", 0)}, Sidecars: []api.Container{c("50m", "32Mi", 0)}}, api.Quantities{MilliCPU: 150, MemoryBytes: 96 << 20}},
		{"a larger init container wins", api.PodTemplate{InitContainers: []api.Container{c("1", "1Gi", 0)}, Containers: []api.Container{c("100m", "64Mi", 0)}, Sidecars: []api.Container{c("50m", "32Mi", 0)}}, api.Quantities{MilliCPU: 1000, MemoryBytes: 1 << 30}},
		{"a smaller init container does not count", api.PodTemplate{InitContainers: []api.Container{c("10m", "1Mi", 0)}, Containers: []api.Container{c("100m", "64Mi", 0)}}, api.Quantities{MilliCPU: 100, MemoryBytes: 64 << 20}},
		{"gpus", api.PodTemplate{Containers: []api.Container{c("1", "1Gi", 2), c("1", "1Gi", 1)}}, api.Quantities{MilliCPU: 2000, MemoryBytes: 2 << 30, GPUs: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.t.PodRequests(); got != tc.want {
				t.Errorf("PodRequests() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeErrorsNameNoGoTypes(t *testing.T) {
	for _, tc := range []struct {
		doc, want string
	}{
		{`[]`, "got an array, want an object"},
		{`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":5}}`, "got a number, want a string"},
		{`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"x"},"spec":{"replicas":"three"}}`, "want an integer"},
	} {
		_, err := api.Decode([]byte(tc.doc))
		if err == nil {
			t.Fatalf("%s: no error", tc.doc)
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %q does not say %q", tc.doc, msg, tc.want)
		}
		for _, goName := range []string{"struct", "int32", "int64", "string \"json", "api."} {
			if strings.Contains(msg, goName) {
				t.Errorf("%s: %q shows a Go type name (%s)", tc.doc, msg, goName)
			}
		}
	}
}
