package upgrade

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

// TestGateViewProjections: the gate's view keeps, of a status, the counts
// of the clusters where the workload wants pods, and of a workload, an
// App's budget (the default when it sets none) or that it is no App.
func TestGateViewProjections(t *testing.T) {
	shares, err := decodeShares([]byte(`{"phase":"Running","clusters":{"zone-a":{"desired":3,"ready":2,"running":3},"zone-b":{"desired":0,"ready":0,"running":0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]shareCounts{"zone-a": {Desired: 3, Ready: 2}}, shares); diff != "" {
		t.Errorf("shares (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		name, doc string
		want      appBudget
	}{
		{"App with a budget", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"a"},"spec":{"replicas":3,"availability":{"minAvailable":"2"},"template":{"containers":[{"name":"c","image":"i"}]}}}`,
			appBudget{App: true, Kind: "minAvailable", Value: "2"}},
		{"App without one", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"a"},"spec":{"replicas":3,"template":{"containers":[{"name":"c","image":"i"}]}}}`,
			appBudget{App: true, Kind: "maxUnavailable", Value: api.DefaultMaxUnavailable}},
		{"a Config", `{"apiVersion":"atoll.dev/v1","kind":"Config","metadata":{"project":"p","name":"c"},"spec":{"data":{"k":"v"}}}`,
			appBudget{}},
	} {
		got, err := decodeBudget([]byte(c.doc))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
