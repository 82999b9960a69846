package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// TestSidecarsAPI drives the managed sidecars: admins only, a set
// validated (fields named) and stored as the next version with its
// history, audited; the status counts the workloads per version they run.
func TestSidecarsAPI(t *testing.T) {
	g := newTestGateway(t, gateway.Config{RatePerSecond: 1000, Burst: 1000})
	tenant, _ := g.GW.Auth().Mint(auth.Identity{Subject: "alice", Roles: map[string]auth.Role{"p": auth.RoleAdmin}})
	audit, err := g.Bus.NC.SubscribeSync(bus.AuditSubject("platform", "set-sidecars"))
	require.NoError(t, err)
	defer audit.Unsubscribe()

	v1 := []byte(`{"sidecars":[{"name":"log","image":"log:1","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}],"rollout":{"bakeSeconds":5,"onFailure":"Rollback"}}`)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/admin/sidecars"}, {"PUT", "/v1/admin/sidecars"}, {"GET", "/v1/admin/sidecars/history"}, {"GET", "/v1/admin/sidecars/status"},
	} {
		resp, body := g.do(t, c.method, c.path, tenant, v1)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s: %s", c.method, c.path, body)
	}

	resp, body := g.do(t, "GET", "/v1/admin/sidecars", g.Admin, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "before any version: %s", body)

	resp, body = g.do(t, "PUT", "/v1/admin/sidecars", g.Admin, []byte(`{"sidecars":[{"name":"Log","privileged":true}],"rollout":{"onFailure":"Panic"}}`))
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "%s", body)
	var eb computeapi.Error
	require.NoError(t, json.Unmarshal(body, &eb))
	var fields []string
	for _, f := range eb.Fields {
		fields = append(fields, f.Field)
	}
	assert.ElementsMatch(t, []string{"sidecars[0].name", "sidecars[0].image", "sidecars[0].privileged", "rollout.onFailure"}, fields)

	for i, doc := range [][]byte{v1, []byte(`{"sidecars":[{"name":"log","image":"log:2","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}`)} {
		resp, body = g.do(t, "PUT", "/v1/admin/sidecars", g.Admin, doc)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
		var v api.SidecarVersion
		require.NoError(t, json.Unmarshal(body, &v))
		assert.Equal(t, int64(i+1), v.Version)
		_, err := audit.NextMsg(5 * time.Second)
		require.NoError(t, err, "the set of version %d is audited", i+1)
	}
	resp, body = g.do(t, "GET", "/v1/admin/sidecars", g.Admin, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	var cur api.SidecarVersion
	require.NoError(t, json.Unmarshal(body, &cur))
	assert.Equal(t, int64(2), cur.Version)
	assert.Equal(t, "log:2", cur.Sidecars[0].Image)
	assert.Equal(t, 1, cur.Rollout.MaxUnavailable, "defaulted")

	resp, body = g.do(t, "GET", "/v1/admin/sidecars/history", g.Admin, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	var hist struct{ Items []api.SidecarVersion }
	require.NoError(t, json.Unmarshal(body, &hist))
	var got []string
	for _, v := range hist.Items {
		got = append(got, v.Sidecars[0].Image+"/"+v.Rollout.OnFailure)
	}
	if diff := cmp.Diff([]string{"log:2/Pause", "log:1/Rollback"}, got); diff != "" {
		t.Errorf("history, newest first (-want +got):\n%s", diff)
	}

	// Workloads on versions 1 and 2 (as admission writes them).
	kv, err := g.Bus.KV(t.Context(), bus.BucketWorkloads)
	require.NoError(t, err)
	for _, w := range []struct {
		name string
		v    int64
	}{{"old", 1}, {"new", 2}, {"newer", 2}} {
		doc := api.Workload{APIVersion: "atoll.dev/v1", Kind: api.KindApp,
			Metadata: api.Metadata{Project: "p", Name: w.name, UID: w.name, Generation: 1, SidecarVersion: w.v},
			Spec:     &api.AppSpec{Common: api.Common{Template: api.PodTemplate{Containers: []api.Container{{Name: "a", Image: "a"}}}}}}
		b, _ := json.Marshal(&doc)
		_, err := kv.Put(t.Context(), doc.Key(), b)
		require.NoError(t, err)
	}
	var st computeapi.SidecarStatus
	require.Eventually(t, func() bool {
		_, body := g.do(t, "GET", "/v1/admin/sidecars/status", g.Admin, nil)
		st = computeapi.SidecarStatus{}
		return json.Unmarshal(body, &st) == nil && len(st.Versions) == 2
	}, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, int64(2), st.Current)
	assert.Equal(t, 1, st.Versions[0].Workloads)
	assert.Equal(t, 2, st.Versions[1].Workloads)
	require.Len(t, st.Behind, 1)
	assert.Equal(t, "old", st.Behind[0].Name)

	// Pause, resume and abort change the control admission reads.
	for _, c := range []struct {
		action string
		check  func(st computeapi.SidecarStatus)
	}{
		{"pause", func(st computeapi.SidecarStatus) {
			assert.True(t, st.Control.Paused)
			assert.Equal(t, "looking", st.Control.Reason)
		}},
		{"resume", func(st computeapi.SidecarStatus) {
			assert.False(t, st.Control.Paused)
			assert.Equal(t, 1, st.Control.ResumeSeq)
		}},
		{"abort", func(st computeapi.SidecarStatus) { assert.Equal(t, int64(2), st.Control.Aborted) }},
	} {
		resp, body := g.do(t, "POST", "/v1/admin/sidecars/"+c.action, g.Admin, []byte(`{"reason":"looking"}`))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", c.action, body)
		st = computeapi.SidecarStatus{}
		require.NoError(t, json.Unmarshal(body, &st))
		c.check(st)
		resp, body = g.do(t, "POST", "/v1/admin/sidecars/"+c.action, tenant, nil)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s by a tenant: %s", c.action, body)
	}
}
