package gateway_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway"
)

// TestSidecarsContainerValidated: a managed sidecar's container is
// checked as a workload's container is (admission injects it into every
// workload it applies to): a bad quantity, image reference, environment
// variable name or port is a 422 naming the field, and nothing is stored.
func TestSidecarsContainerValidated(t *testing.T) {
	g := newTestGateway(t, gateway.Config{RatePerSecond: 1000, Burst: 1000})
	tests := []struct {
		name, doc, field string
	}{
		{"a cpu that is no quantity", `{"sidecars":[{"name":"log","image":"log:1","resources":{"requests":{"cpu":"lots"}}}]}`, "sidecars[0].resources.requests.cpu"},
		{"a negative memory", `{"sidecars":[{"name":"log","image":"log:1","resources":{"requests":{"memory":"-1Mi"}}}]}`, "sidecars[0].resources.requests.memory"},
		{"an image that is no reference", `{"sidecars":[{"name":"log","image":"log 1; rm -rf"}]}`, "sidecars[0].image"},
		{"an environment variable name with =", `{"sidecars":[{"name":"log","image":"log:1","env":[{"name":"A=B","value":"x"}]}]}`, "sidecars[0].env[0].name"},
		{"a port out of range", `{"sidecars":[{"name":"log","image":"log:1","ports":[{"containerPort":70000}]}]}`, "sidecars[0].ports[0].containerPort"},
		{"the second sidecar's", `{"sidecars":[{"name":"a","image":"a:1"},{"name":"b","image":"b:1","resources":{"limits":{"cpu":"x"}}}]}`, "sidecars[1].resources.limits.cpu"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := g.do(t, "PUT", "/v1/admin/sidecars", g.Admin, []byte(tc.doc))
			require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "%s", body)
			var e computeapi.Error
			require.NoError(t, json.Unmarshal(body, &e))
			var fields []string
			for _, f := range e.Fields {
				fields = append(fields, f.Field)
			}
			assert.True(t, slices.Contains(fields, tc.field), "the refusal names %v, want %s", fields, tc.field)
			resp, body = g.do(t, "GET", "/v1/admin/sidecars", g.Admin, nil)
			assert.Equal(t, http.StatusNotFound, resp.StatusCode, "a version was stored: %s", body)
		})
	}
	// A missing image is reported once, as the spec's own check names it.
	resp, body := g.do(t, "PUT", "/v1/admin/sidecars", g.Admin, []byte(`{"sidecars":[{"name":"log","image":""}]}`))
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "%s", body)
	var e computeapi.Error
	require.NoError(t, json.Unmarshal(body, &e))
	assert.Len(t, e.Fields, 1, "%s", body)
	resp, body = g.do(t, "PUT", "/v1/admin/sidecars", g.Admin, []byte(`{"sidecars":[{"name":"log","image":"registry.example/log:1.2","env":[{"name":"LEVEL","value":"info"}],"resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}`))
	assert.Equal(t, http.StatusCreated, resp.StatusCode, "a valid spec: %s", body)
}
