package gateway_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// TestPushMetric: a developer of the project pushes a custom metric of an
// existing App and the sample appears on the App's metrics subject; a
// viewer, another project's developer, cpu, a missing App and a burst
// above the App's rate are refused.
func TestPushMetric(t *testing.T) {
	g := newTestGateway(t, gateway.Config{})
	ctx := context.Background()
	kv, err := g.Bus.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	one := int32(1)
	w := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp, Metadata: api.Metadata{Project: "team", Name: "web", Generation: 1},
		Spec: &api.AppSpec{Replicas: &one, Common: api.Common{Template: api.PodTemplate{Containers: []api.Container{{Name: "c", Image: "x"}}}}}}
	doc, _ := json.Marshal(w)
	_, err = kv.Put(ctx, w.Key(), doc)
	require.NoError(t, err)

	samples := make(chan *nats.Msg, 64)
	sub, err := g.Bus.NC.ChanSubscribe(bus.MetricsSubject("team", "web", "qps"), samples)
	require.NoError(t, err)
	defer sub.Unsubscribe()

	mint := func(id auth.Identity) string {
		tok, _ := g.GW.Auth().Mint(id)
		return tok
	}
	dev := mint(auth.Identity{Subject: "dev", Roles: map[string]auth.Role{"team": auth.RoleDeveloper}})
	viewer := mint(auth.Identity{Subject: "viewer", Roles: map[string]auth.Role{"team": auth.RoleViewer}})
	other := mint(auth.Identity{Subject: "other", Roles: map[string]auth.Role{"elsewhere": auth.RoleDeveloper}})

	path := "/v1/projects/team/apps/web/metrics/qps"
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, body := g.do(c, "POST", path, dev, []byte(`{"value": 420}`))
		assert.Equal(c, 202, resp.StatusCode, "%s", body)
	}, 5*time.Second, 50*time.Millisecond, "the App reaches the gateway's cache")
	select {
	case m := <-samples:
		var s api.MetricSample
		require.NoError(t, json.Unmarshal(m.Data, &s))
		assert.Equal(t, 420.0, s.Value)
		assert.WithinDuration(t, time.Now(), s.At, 5*time.Second)
	case <-time.After(5 * time.Second):
		t.Fatal("no sample on the metrics subject")
	}

	for _, c := range []struct {
		name, token, path, body string
		want                    int
	}{
		{"viewer", viewer, path, `{"value": 1}`, 403},
		{"another project", other, path, `{"value": 1}`, 404},
		{"cpu is the platform's", dev, "/v1/projects/team/apps/web/metrics/cpu", `{"value": 1}`, 400},
		{"missing App", dev, "/v1/projects/team/apps/nope/metrics/qps", `{"value": 1}`, 404},
		{"negative", dev, path, `{"value": -1}`, 400},
	} {
		resp, body := g.do(t, "POST", c.path, c.token, []byte(c.body))
		assert.Equal(t, c.want, resp.StatusCode, "%s: %s", c.name, body)
	}
	limited := false
	for range gateway.MetricPushBurst + 5 {
		if resp, _ := g.do(t, "POST", path, dev, []byte(`{"value": 1}`)); resp.StatusCode == 429 {
			limited = resp.Header.Get("Retry-After") != ""
			break
		}
	}
	assert.True(t, limited, "a burst above the App's rate is refused with Retry-After")
}
