package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
)

// TestSLIsLastHour: GET /v1/slis answers the signed-in caller the last
// hour per minute, fed by the same requests and events as the atoll_sli_*
// series.
func TestSLIsLastHour(t *testing.T) {
	g, _ := instrumented(t)
	ctx := t.Context()

	resp, body := g.do(t, http.MethodGet, "/v1/slis", "", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "without a token: %s", body)

	// A 503: no admission behind this gateway.
	resp, _ = g.do(t, http.MethodPost, "/v1/projects/demo/workloads", g.Admin,
		[]byte(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":"web"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	// A launch: admitted, then running.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := g.Bus.Stream(ctx, bus.StreamEvents)
		require.NoError(c, err)
		info, err := st.Info(ctx)
		require.NoError(c, err)
		assert.Positive(c, info.State.Consumers)
	}, 10*time.Second, 20*time.Millisecond)
	for _, e := range []string{api.EventAdmitted, api.EventRunning} {
		b, _ := json.Marshal(api.WorkloadEvent{Project: "demo", Kind: api.KindApp, Name: "web", Event: e, Generation: 1, Time: time.Now()})
		_, err := g.Bus.Publish(ctx, bus.EventSubject("demo", api.KindApp, "web", e), fmt.Sprintf("web.%s.1", e), b, nil)
		require.NoError(t, err)
	}

	var last computeapi.SLIMinute
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, body := g.do(c, http.MethodGet, "/v1/slis", g.Admin, nil)
		require.Equal(c, http.StatusOK, resp.StatusCode, "%s", body)
		var h computeapi.SLIHistory
		require.NoError(c, json.Unmarshal(body, &h))
		require.Len(c, h.Minutes, 60)
		assert.Equal(c, 60, h.IntervalSeconds)
		var sum computeapi.SLIMinute
		for _, m := range h.Minutes {
			sum.Requests += m.Requests
			sum.Errors += m.Errors
			sum.Launches += m.Launches
			if m.Launches > 0 {
				last = m
			}
		}
		// The 401, the 503 and the earlier GETs of this poll.
		assert.GreaterOrEqual(c, sum.Requests, int64(2))
		assert.Equal(c, int64(1), sum.Errors, "5xx answers")
		assert.Equal(c, int64(1), sum.Launches, "launches")
	}, 10*time.Second, 50*time.Millisecond)
	assert.Positive(t, last.LaunchP50Seconds)
	assert.LessOrEqual(t, last.LaunchP95Seconds, last.LaunchMaxSeconds)
	assert.WithinDuration(t, time.Now(), last.Start, 2*time.Minute)
}
