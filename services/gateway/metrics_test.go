package gateway_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/services/gateway"
)

// instrumented starts a test gateway with an admin server's metrics.
func instrumented(t *testing.T) (*testGateway, *admin.Server) {
	t.Helper()
	adm, err := admin.New(admin.Config{Service: "gateway"}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	g := newTestGateway(t, gateway.Config{}, func(gw *gateway.Service) { gw.Instrument(adm) })
	return g, adm
}

func TestHTTPMetricsPerRouteAndAvailability(t *testing.T) {
	g, adm := instrumented(t)
	g.do(t, http.MethodGet, "/healthz", "", nil)
	g.do(t, http.MethodGet, "/v1/whoami", g.Admin, nil)
	g.do(t, http.MethodGet, "/v1/projects/demo/workloads", "", nil) // 401
	// No admission behind this gateway: a create is answered 503 once
	// its retries give up.
	resp, _ := g.do(t, http.MethodPost, "/v1/projects/demo/workloads", g.Admin,
		[]byte(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":"web"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	// Each request is recorded once its answer is written.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := admin.Gather(adm.Registry())
		require.NoError(c, err)
		for series, want := range map[string]float64{
			`atoll_http_requests_total{code="200",method="GET",route="/healthz",service="gateway"}`:                          1,
			`atoll_http_requests_total{code="200",method="GET",route="/v1/whoami",service="gateway"}`:                        1,
			`atoll_http_requests_total{code="401",method="GET",route="/v1/projects/{project}/workloads",service="gateway"}`:  1,
			`atoll_http_requests_total{code="503",method="POST",route="/v1/projects/{project}/workloads",service="gateway"}`: 1,
			`atoll_http_request_duration_seconds{method="GET",route="/v1/whoami",service="gateway"}`:                         1,
			`atoll_sli_api_requests_total{service="gateway"}`:                                                                3,
			`atoll_sli_api_errors_total{service="gateway"}`:                                                                  1,
		} {
			assert.Equal(c, want, got[series], series)
		}
		assert.Positive(c, got[`atoll_breaker_state{service="gateway",target="admission"}`], "admission's breaker is not closed")
	}, 5*time.Second, 20*time.Millisecond)
}

// TestLaunchSLIFromEvents: the gateway turns a workload's events into
// submit→propagated and submit→running latencies, once per generation,
// labelled with the workload's tier as its read cache holds it.
func TestLaunchSLIFromEvents(t *testing.T) {
	g, adm := instrumented(t)
	ctx := t.Context()
	// web is a Preemptible App in the read cache; old is not there at all.
	web := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp,
		Metadata: api.Metadata{Project: "demo", Name: "web", Generation: 1},
		Spec:     &api.AppSpec{Common: api.Common{Tier: api.TierPreemptible}}}
	kv, err := g.Bus.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	raw, err := json.Marshal(web)
	require.NoError(t, err)
	_, err = kv.Put(ctx, web.Key(), raw)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok, _ := g.GW.Cache().Get(t.Context(), web.Key()); return ok }, 10*time.Second, 20*time.Millisecond)
	// The SLI's consumer reads events from its creation on.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := g.Bus.Stream(ctx, bus.StreamEvents)
		require.NoError(c, err)
		info, err := st.Info(ctx)
		require.NoError(c, err)
		assert.Positive(c, info.State.Consumers)
	}, 10*time.Second, 20*time.Millisecond)

	publish := func(name, event string, gen int64) {
		body, _ := json.Marshal(api.WorkloadEvent{Project: "demo", Kind: api.KindApp, Name: name, Event: event, Generation: gen, Time: time.Now()})
		_, err := g.Bus.Publish(ctx, bus.EventSubject("demo", api.KindApp, name, event), fmt.Sprintf("%s.%s.%d", name, event, gen), body, nil)
		require.NoError(t, err)
	}
	for _, e := range []struct {
		name, event string
		gen         int64
	}{
		{"web", api.EventAdmitted, 1}, {"web", api.EventScheduled, 1}, {"web", api.EventPropagated, 1}, {"web", api.EventRunning, 1},
		{"web", api.EventRunning, 1}, // again (back from progressing): not a launch
		{"web", api.EventScaled, 2}, {"web", api.EventPropagated, 2},
		{"old", api.EventPropagated, 7}, // its generation started before the gateway: unknown
	} {
		publish(e.name, e.event, e.gen)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := admin.Gather(adm.Registry())
		require.NoError(c, err)
		assert.Equal(c, 1.0, got[`atoll_sli_submit_to_propagated_seconds{service="gateway",start="admitted",tier="Preemptible"}`])
		assert.Equal(c, 1.0, got[`atoll_sli_submit_to_running_seconds{service="gateway",start="admitted",tier="Preemptible"}`])
		assert.Equal(c, 1.0, got[`atoll_sli_submit_to_propagated_seconds{service="gateway",start="scaled",tier="Preemptible"}`])
		assert.NotContains(c, got, `atoll_sli_submit_to_running_seconds{service="gateway",start="scaled",tier="Preemptible"}`)
		for series := range got {
			assert.NotContains(c, series, `tier="unknown"`, "old's generation started before the gateway: no observation")
		}
	}, 10*time.Second, 20*time.Millisecond)
}
