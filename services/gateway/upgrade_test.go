package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// TestUpgradeAPI drives the rotation plan resource: admins only, PUT
// validated with the plan's own validation (fields named), the control
// keys written as the upgrade service reads them, the progress it writes
// rendered per cluster and pool, and every change audited.
func TestUpgradeAPI(t *testing.T) {
	g := newTestGateway(t, gateway.Config{RatePerSecond: 1000, Burst: 1000})
	tenant, _ := g.GW.Auth().Mint(auth.Identity{Subject: "alice", Roles: map[string]auth.Role{"p": auth.RoleAdmin}})
	audit, err := g.Bus.NC.SubscribeSync(bus.AuditSubject("platform", ">"))
	require.NoError(t, err)
	defer audit.Unsubscribe()
	kv, err := g.Bus.KV(t.Context(), bus.BucketUpgrade)
	require.NoError(t, err)

	plan := []byte(`{"target":{"label":"atoll.dev/version","value":"v2"},"soak":"10s",
		"clusters":[{"name":"canary","pools":[{"name":"general","maxUnavailable":"10%"}]},
		            {"name":"b","pools":[{"name":"general","maxSurge":"1"},{"name":"gpu"}]}]}`)

	// A tenant, even a project admin, is refused every call.
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/upgrades"}, {"GET", "/v1/upgrades/v2"}, {"PUT", "/v1/upgrades/v2"},
		{"POST", "/v1/upgrades/v2/pause"}, {"POST", "/v1/upgrades/v2/resume"}, {"POST", "/v1/upgrades/v2/abort"},
	} {
		resp, body := g.do(t, c.method, c.path, tenant, plan)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s: %s", c.method, c.path, body)
	}

	// Invalid plans: 400 naming every bad field.
	for _, c := range []struct {
		name, body string
		fields     []string
	}{
		{"both zero", `{"target":{"label":"l","value":"v"},"drainPolicy":"later",
			"clusters":[{"name":"a","pools":[{"name":"p","maxUnavailable":"0","maxSurge":"0"}]}]}`,
			[]string{"clusters[0].pools[0]", "drainPolicy"}},
		{"bad percent and window", `{"target":{"label":"l","value":"v"},"windows":[{"start":"25:00","end":"02:00"}],
			"clusters":[{"name":"a","pools":[{"name":"p","maxUnavailable":"150%"}]}]}`,
			[]string{"clusters[0].pools[0].maxUnavailable", "windows[0]"}},
		{"no clusters", `{"target":{"label":"l","value":"v"},"clusters":[]}`, []string{"clusters"}},
		{"other name", `{"name":"v3","target":{"label":"l","value":"v"},"clusters":[{"name":"a","pools":[{"name":"p"}]}]}`, []string{"name"}},
		{"unknown field", `{"target":{"label":"l","value":"v"},"clusters":[],"force":true}`, nil},
	} {
		resp, body := g.do(t, "PUT", "/v1/upgrades/v2", g.Admin, []byte(c.body))
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", c.name, body)
		var e computeapi.Error
		require.NoError(t, json.Unmarshal(body, &e))
		var got []string
		for _, f := range e.Fields {
			got = append(got, f.Field)
		}
		for _, f := range c.fields {
			assert.Contains(t, got, f, "%s: %s", c.name, body)
		}
	}
	_, err = kv.Get(t.Context(), "plan.v2")
	require.Error(t, err, "nothing invalid was written")

	resp, body := g.do(t, "GET", "/v1/upgrades/v2", g.Admin, nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", body)
	resp, body = g.do(t, "POST", "/v1/upgrades/v2/pause", g.Admin, nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", body)

	// PUT stores the defaulted plan under plan.<name> and answers it.
	resp, body = g.do(t, "PUT", "/v1/upgrades/v2", g.Admin, plan)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	var u computeapi.Upgrade
	require.NoError(t, json.Unmarshal(body, &u))
	assert.Equal(t, "v2", u.Spec.Name)
	assert.Equal(t, "NotStarted", u.Phase)
	assert.Equal(t, "pause", u.Spec.DrainPolicy, "defaulted")
	assert.Equal(t, "1", u.Spec.Clusters[1].Pools[1].MaxUnavailable, "defaulted")
	e, err := kv.Get(t.Context(), "plan.v2")
	require.NoError(t, err)
	var stored map[string]any
	require.NoError(t, json.Unmarshal(e.Value(), &stored))
	assert.Equal(t, "10s", stored["soak"])

	// Pause and resume write ctl.<name> as the service reads it.
	control := func() map[string]any {
		e, err := kv.Get(t.Context(), "ctl.v2")
		require.NoError(t, err)
		var c map[string]any
		require.NoError(t, json.Unmarshal(e.Value(), &c))
		return c
	}
	resp, body = g.do(t, "POST", "/v1/upgrades/v2/pause", g.Admin, []byte(`{"reason":"freeze"}`))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.NoError(t, json.Unmarshal(body, &u))
	assert.True(t, u.Control.Pause)
	assert.True(t, u.PauseRequested, "not yet honoured by the service")
	assert.Equal(t, "freeze (admin)", u.Control.Reason)
	assert.Equal(t, true, control()["pause"])
	resp, body = g.do(t, "POST", "/v1/upgrades/v2/resume", g.Admin, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	c := control()
	assert.Nil(t, c["pause"])
	assert.Equal(t, float64(1), c["resumeSeq"], "a resume lifts automatic pauses taken before it")

	// The progress the service writes is rendered per cluster and pool.
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	prog, _ := json.Marshal(map[string]any{
		"plan": "v2", "phase": "Paused", "reason": "App p/web below its budget", "pausedBy": "gate",
		"cluster": 1, "pool": 0, "wave": 2, "updated": since, "seq": 9,
		"nodes": map[string]any{
			"u1": map[string]any{"uid": "u1", "name": "c1", "cluster": "canary", "pool": "general", "state": "done", "since": since},
			"u2": map[string]any{"uid": "u2", "name": "b1", "cluster": "b", "pool": "general", "state": "draining", "since": since, "blocked": "p/web"},
			"u3": map[string]any{"uid": "u3", "name": "b2", "cluster": "b", "pool": "general", "state": "pending", "since": since},
		},
	})
	_, err = kv.Put(t.Context(), "p.v2", prog)
	require.NoError(t, err)
	resp, body = g.do(t, "GET", "/v1/upgrades/v2", g.Admin, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.NoError(t, json.Unmarshal(body, &u))
	assert.Equal(t, "Paused", u.Phase)
	assert.Equal(t, "App p/web below its budget", u.Reason)
	assert.Equal(t, "gate", u.PausedBy)
	assert.Equal(t, 1, u.NodesDone)
	assert.Equal(t, 1, u.NodesInFlight)
	require.Len(t, u.Clusters, 2)
	assert.Equal(t, "done", u.Clusters[0].State)
	assert.Equal(t, map[string]int{"done": 1}, u.Clusters[0].Pools[0].Nodes)
	assert.Equal(t, "current", u.Clusters[1].State)
	assert.Equal(t, computeapi.UpgradePool{Name: "general", MaxSurge: "1", State: "current", Wave: 2,
		Nodes: map[string]int{"draining": 1, "pending": 1}}, u.Clusters[1].Pools[0])
	assert.Equal(t, "pending", u.Clusters[1].Pools[1].State)
	require.Len(t, u.Nodes, 3)
	assert.Equal(t, "p/web", u.Nodes[1].Blocked)

	resp, body = g.do(t, "POST", "/v1/upgrades/v2/abort", g.Admin, []byte(`{"reason":"bad image"}`))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.Equal(t, true, control()["abort"])

	// The list summarizes, without the nodes.
	resp, body = g.do(t, "GET", "/v1/upgrades", g.Admin, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	var list computeapi.UpgradeList
	require.NoError(t, json.Unmarshal(body, &list))
	require.Len(t, list.Items, 1)
	assert.Equal(t, "v2", list.Items[0].Name)
	assert.Equal(t, 1, list.Items[0].NodesDone)
	assert.Empty(t, list.Items[0].Nodes)

	verbs := map[string]int{}
	for {
		m, err := audit.NextMsg(time.Second)
		if err != nil {
			break
		}
		verbs[m.Subject]++
	}
	// set-upgrade: the tenant's, 5 invalid and the admin's; pause: the
	// tenant's, the 404 and the admin's.
	assert.Equal(t, 7, verbs[bus.AuditSubject("platform", "set-upgrade")], "%v", verbs)
	assert.Equal(t, 3, verbs[bus.AuditSubject("platform", "pause-upgrade")], "%v", verbs)
	assert.Equal(t, 2, verbs[bus.AuditSubject("platform", "resume-upgrade")], "%v", verbs)
	assert.Equal(t, 2, verbs[bus.AuditSubject("platform", "abort-upgrade")], "%v", verbs)
}
