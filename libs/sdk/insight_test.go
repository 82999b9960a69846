package sdk

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/computeapi"
)

func TestKinds(t *testing.T) {
	want := []computeapi.KindInfo{
		{Name: "App", Path: "app", Placed: true, Pods: true, Ops: []string{"pause", "scale"}},
		{Name: "Scaler", Path: "scaler", Ops: []string{"pause", "resume"}},
	}
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/kinds" {
			apiError(w, 404, "NotFound", r.Method+" "+r.URL.Path)
			return
		}
		writeJSON(w, 200, computeapi.KindList{Items: want})
	})
	got, err := c.Kinds(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
}
