package sdk_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// TestConfigDocuments: the documents NewConfig and NewSecret make are
// what the API decodes; SecretOf reads a Secret's view and refuses
// another kind.
func TestConfigDocuments(t *testing.T) {
	c, err := sdk.NewConfig("web", map[string]string{"app": "web"}, computeapi.ConfigSpec{Data: map[string]string{"A": "1"}, Files: map[string]string{"f.conf": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sdk.NewSecret("db", nil, map[string]string{"PASSWORD": "p"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range []computeapi.WorkloadDocument{c, s} {
		b, _ := json.Marshal(d)
		got[string(d.Kind)] = string(b)
	}
	want := map[string]string{
		"Config": `{"apiVersion":"atoll.dev/v1","kind":"Config","metadata":{"labels":{"app":"web"},"name":"web"},"spec":{"data":{"A":"1"},"files":{"f.conf":"x"}}}`,
		"Secret": `{"apiVersion":"atoll.dev/v1","kind":"Secret","metadata":{"name":"db"},"spec":{"data":{"PASSWORD":"p"}}}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("documents (-want +got):\n%s", diff)
	}
	w := &computeapi.Workload{Kind: "Secret", Spec: json.RawMessage(`{"keys":["PASSWORD"],"version":2,"digest":"ab","updatedBy":"alice"}`)}
	v, err := sdk.SecretOf(w)
	if err != nil || v.Version != 2 || v.UpdatedBy != "alice" || len(v.Keys) != 1 {
		t.Errorf("SecretOf = %+v, %v", v, err)
	}
	if _, err := sdk.SecretOf(&computeapi.Workload{Kind: "App", Spec: json.RawMessage(`{}`)}); err == nil {
		t.Error("SecretOf an App: no error")
	}
}
