package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// fakeRemediation answers remediation's status, pause and resume
// endpoints on the test bus with remediation's reply types
// (api.RemediationClusterStatus, api.RemediationScope) and the shape of
// its requests (strictly decoded, as the service does), and keeps the
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
	st := remediationFixture()
	st.Paused = paused
	return []api.RemediationClusterStatus{st}, nil
}

// remAt is the fixture's moments: 2026-01-02T03:04:05Z plus s seconds.
func remAt(s int) time.Time {
	return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(s) * time.Second)
}

// remediationFixture is remediation's reply for zone-a, every field set
// (with transitions, which the Compute API leaves out).
func remediationFixture() api.RemediationClusterStatus {
	pod := api.RemediationPod{Namespace: "p", Name: "web-0", UID: "x"}
	return api.RemediationClusterStatus{
		Cluster: "zone-a", Holder: "remediation-0", Reachable: true, Time: remAt(0),
		Breakers: []api.RemediationBreaker{{Domain: "zone/a", Unhealthy: 2, Total: 5, Allowed: 1, Open: true, OpenedAt: remAt(1), CoolingUntil: remAt(2)}},
		Leases:   []api.RemediationLease{{Node: "n1", Owner: "remediation", Reason: "Ready=False", Expires: remAt(3)}},
		Nodes: []api.RemediationNode{{
			Cluster: "zone-a", Node: "n1", UID: "u1", Pool: "general", Zone: "a", Phase: "Draining", PhaseSince: remAt(4),
			Signal: "Ready=False", UnhealthySince: remAt(5), Waiting: "breaker zone/a open", Transitions: []time.Time{remAt(6)}, Flapping: true,
			Drain: api.RemediationDrain{Started: remAt(7), Passes: 3, NextPass: remAt(8), Evicted: []api.RemediationPod{pod},
				Blocked: []api.RemediationBlocked{{Pod: pod, PDB: "p/web", Message: "would violate"}}, Force: true},
			Replace: api.RemediationReplace{Attempt: 2, Name: "n1-r2", Started: remAt(9), Prev: "n1-r1", Done: true},
			History: []api.RemediationEvent{{Seq: 1, Time: remAt(10), Event: "cordoned", Message: "Ready=False for 30s"}},
		}},
	}
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
		if set {
			return api.RemediationScope{Paused: r.Cluster}, nil
		}
		return api.RemediationScope{Resumed: r.Cluster}, nil
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
	// Every field of the Compute API's status is mapped from remediation's
	// reply (a field added to the spec and not mapped stays zero here).
	requireAllSet(t, "RemediationCluster", reflect.ValueOf(c), "Paused")
	pod := computeapi.RemediationPod{Namespace: "p", Name: "web-0", Uid: "x"}
	want := computeapi.RemediationCluster{
		Cluster: "zone-a", Holder: "remediation-0", Reachable: true, Time: remAt(0),
		Breakers: []computeapi.RemediationBreaker{{Domain: "zone/a", Unhealthy: 2, Total: 5, Allowed: 1, Open: true, OpenedAt: remAt(1), CoolingUntil: remAt(2)}},
		Leases:   []computeapi.RemediationLease{{Node: "n1", Owner: "remediation", Reason: "Ready=False", Expires: remAt(3)}},
		Nodes: []computeapi.RemediationNode{{
			Cluster: "zone-a", Node: "n1", Uid: "u1", Pool: "general", Zone: "a", Phase: "Draining", PhaseSince: remAt(4),
			Signal: "Ready=False", UnhealthySince: remAt(5), Waiting: "breaker zone/a open", Flapping: true,
			Drain:   computeapi.RemediationDrain{Started: remAt(7), Passes: 3, NextPass: remAt(8), Evicted: []computeapi.RemediationPod{pod}, Force: true},
			Replace: computeapi.RemediationReplace{Attempt: 2, Name: "n1-r2", Started: remAt(9), Prev: "n1-r1", Done: true},
			History: []computeapi.RemediationEvent{{Seq: 1, Time: remAt(10), Event: "cordoned", Message: "Ready=False for 30s"}},
		}},
	}
	// The spec's blocked pod has no named type: compared on its own.
	blocked := c.Nodes[0].Drain.Blocked
	require.Len(t, blocked, 1)
	assert.Equal(t, pod, blocked[0].Pod)
	assert.Equal(t, "p/web", blocked[0].Pdb, "the blocking PDB is named")
	assert.Equal(t, "would violate", blocked[0].Message)
	c.Nodes[0].Drain.Blocked = nil
	assert.Equal(t, want, c)

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

// requireAllSet fails when a field reachable from v (through structs and
// the first element of slices) holds its zero value; skip names fields
// left out at any depth.
func requireAllSet(t *testing.T, path string, v reflect.Value, skip ...string) {
	t.Helper()
	require.False(t, v.IsZero(), "%s is zero", path)
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if name := v.Type().Field(i).Name; !slices.Contains(skip, name) {
				requireAllSet(t, path+"."+name, v.Field(i), skip...)
			}
		}
	case v.Kind() == reflect.Slice:
		requireAllSet(t, path+"[0]", v.Index(0), skip...)
	}
}
