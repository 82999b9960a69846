package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// fakeRemediation answers remediation's status, pause and resume
// endpoints on the test bus with the shapes of remediation.ClusterStatus
// and PauseRequest (strictly decoded, as the service does), and keeps the
// pauses it is sent: enough to see the gateway translate both ways. The
// remediation e2e (services/atoll/e2e/remediation) checks the real service.
type fakeRemediation struct {
	mu     sync.Mutex
	paused map[string]string // cluster ("" the region) -> reason
	by     []string
}

type fakeStatusReq struct {
	Cluster string `json:"cluster,omitempty"`
}

type fakePauseReq struct {
	Cluster string `json:"cluster,omitempty"`
	Reason  string `json:"reason,omitempty"`
	By      string `json:"by,omitempty"`
}

func (f *fakeRemediation) status(_ context.Context, r fakeStatusReq, _ micro.Request) (any, error) {
	if r.Cluster != "" && r.Cluster != "zone-a" {
		return nil, bus.Errorf(http.StatusNotFound, "NotFound", "no member cluster %q", r.Cluster)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// As remediation words it (Service.paused): the region's pause first.
	paused := ""
	if why, ok := f.paused["zone-a"]; ok {
		paused = "paused (cluster): " + why
	}
	if why, ok := f.paused[""]; ok {
		paused = "paused (region): " + why
	}
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// The JSON of remediation.ClusterStatus, with a field the API leaves
	// out (transitions).
	return []map[string]any{{
		"cluster": "zone-a", "holder": "remediation-0", "reachable": true, "paused": paused, "time": since,
		"breakers": []map[string]any{{"domain": "zone/a", "unhealthy": 2, "total": 5, "allowed": 1, "open": true, "openedAt": since}},
		"leases":   []map[string]any{{"node": "n1", "owner": "remediation", "reason": "Ready=False", "expires": since}},
		"nodes": []map[string]any{{
			"cluster": "zone-a", "node": "n1", "uid": "u1", "pool": "general", "phase": "Draining", "phaseSince": since,
			"signal": "Ready=False", "unhealthySince": since, "transitions": []time.Time{since},
			"drain": map[string]any{"passes": 3, "blocked": []map[string]any{{
				"pod": map[string]any{"namespace": "p", "name": "web-0", "uid": "x"}, "pdb": "p/web"}}},
			"history": []map[string]any{{"seq": 1, "time": since, "event": "cordoned", "message": "Ready=False for 30s"}},
		}},
	}}, nil
}

func (f *fakeRemediation) pause(set bool) bus.EndpointFunc[fakePauseReq] {
	return func(_ context.Context, r fakePauseReq, _ micro.Request) (any, error) {
		if r.Cluster != "" && r.Cluster != "zone-a" {
			return nil, bus.Errorf(http.StatusNotFound, "NotFound", "no member cluster %q", r.Cluster)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.by = append(f.by, r.By)
		if set {
			f.paused[r.Cluster] = r.Reason
		} else {
			delete(f.paused, r.Cluster)
		}
		return map[string]string{"ok": "yes"}, nil
	}
}

func TestRemediationAPI(t *testing.T) {
	g := newTestGateway(t, gateway.Config{RatePerSecond: 1000, Burst: 1000})
	f := &fakeRemediation{paused: map[string]string{}}
	eps, err := g.Bus.Serve(t.Context(), bus.ServeConfig{Name: "remediation"},
		bus.Endpoint("status", 5*time.Second, f.status),
		bus.Endpoint("pause", 5*time.Second, f.pause(true)),
		bus.Endpoint("resume", 5*time.Second, f.pause(false)),
	)
	require.NoError(t, err)
	t.Cleanup(func() { _ = eps.Stop() })
	tenant, _ := g.GW.Auth().Mint(auth.Identity{Subject: "alice", Roles: map[string]auth.Role{"p": auth.RoleAdmin}})
	audit, err := g.Bus.NC.SubscribeSync(bus.AuditSubject("platform", ">"))
	require.NoError(t, err)
	defer audit.Unsubscribe()

	// A tenant, even a project admin, is refused every call.
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/remediation"},
		{"POST", "/v1/remediation/pause"},
		{"POST", "/v1/remediation/resume"},
	} {
		resp, body := g.do(t, c.method, c.path, tenant, []byte(`{"cluster":"zone-a"}`))
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s: %s", c.method, c.path, body)
	}

	get := func(path string) computeapi.RemediationStatus {
		t.Helper()
		resp, body := g.do(t, "GET", path, g.Admin, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		var st computeapi.RemediationStatus
		require.NoError(t, json.Unmarshal(body, &st))
		return st
	}
	st := get("/v1/remediation")
	require.Len(t, st.Items, 1)
	c := st.Items[0]
	assert.Equal(t, "zone-a", c.Cluster)
	assert.True(t, c.Reachable)
	assert.Empty(t, c.Paused)
	require.Len(t, c.Breakers, 1)
	assert.Equal(t, computeapi.RemediationBreaker{Domain: "zone/a", Unhealthy: 2, Total: 5, Allowed: 1, Open: true,
		OpenedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, c.Breakers[0])
	require.Len(t, c.Nodes, 1)
	n := c.Nodes[0]
	assert.Equal(t, "Draining", n.Phase)
	assert.Equal(t, "Ready=False", n.Signal)
	require.Len(t, n.Drain.Blocked, 1)
	assert.Equal(t, "p/web", n.Drain.Blocked[0].Pdb, "the blocking PDB is named")
	require.Len(t, n.History, 1)
	assert.Equal(t, "cordoned", n.History[0].Event)
	require.Len(t, c.Leases, 1)

	resp, body := g.do(t, "GET", "/v1/remediation?cluster=nope", g.Admin, nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", body)

	// Pause through the API shows in the status it answers and in the next
	// GET; resume lifts it. Each is audited under the platform project.
	resp, body = g.do(t, "POST", "/v1/remediation/pause", g.Admin, []byte(`{"cluster":"zone-a","reason":"network maintenance"}`))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	var after computeapi.RemediationStatus
	require.NoError(t, json.Unmarshal(body, &after))
	require.Len(t, after.Items, 1)
	assert.Equal(t, "paused (cluster): network maintenance", after.Items[0].Paused)
	assert.Equal(t, "paused (cluster): network maintenance", get("/v1/remediation?cluster=zone-a").Items[0].Paused)

	resp, body = g.do(t, "POST", "/v1/remediation/pause", g.Admin, []byte(`{"reason":"freeze"}`))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.Equal(t, "paused (region): freeze", get("/v1/remediation").Items[0].Paused)

	for _, body := range []string{`{"cluster":"zone-a"}`, `{}`} {
		resp, b := g.do(t, "POST", "/v1/remediation/resume", g.Admin, []byte(body))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	}
	assert.Empty(t, get("/v1/remediation").Items[0].Paused)

	resp, body = g.do(t, "POST", "/v1/remediation/pause", g.Admin, []byte(`{"cluster":"nope"}`))
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", body)
	resp, body = g.do(t, "POST", "/v1/remediation/pause", g.Admin, []byte(`{"cluster":"zone-a","force":true}`))
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "unknown fields are refused: %s", body)

	f.mu.Lock()
	assert.Equal(t, []string{"admin", "admin", "admin", "admin"}, f.by, "the caller is passed as by")
	f.mu.Unlock()

	verbs := map[string]int{}
	for {
		m, err := audit.NextMsg(time.Second)
		if err != nil {
			break
		}
		verbs[m.Subject]++
	}
	// Pause: the tenant's (403), 2 by the admin, the 404 and the 400;
	// resume: the tenant's (403) and 2 by the admin.
	assert.Equal(t, 5, verbs[bus.AuditSubject("platform", "pause-remediation")], "%v", verbs)
	assert.Equal(t, 3, verbs[bus.AuditSubject("platform", "resume-remediation")], "%v", verbs)
}
