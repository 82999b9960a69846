package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// putProject writes a project's document as admission would.
func putProject(t *testing.T, b *bus.Bus, d api.ProjectDoc) {
	t.Helper()
	kv, err := b.KV(context.Background(), bus.BucketProjects)
	require.NoError(t, err)
	v, _ := json.Marshal(d)
	_, err = kv.Put(context.Background(), api.ProjectKey(d.Name), v)
	require.NoError(t, err)
}

// TestRolesFollowTheProjectsBucket: a member's role holds as soon as the
// bucket says so, and ends as soon as it does, with nothing reloaded; a
// group's members get the group's role; the highest of the token's and
// the membership's role applies.
func TestRolesFollowTheProjectsBucket(t *testing.T) {
	a, err := auth.New(auth.Config{})
	require.NoError(t, err)
	g := newTestGateway(t, gateway.Config{Authenticator: a})
	bob, _ := a.Mint(auth.Identity{Subject: "bob"})
	eve, _ := a.Mint(auth.Identity{Subject: "eve", Groups: []string{"eng"}})
	carl, _ := a.Mint(auth.Identity{Subject: "carl", Roles: map[string]auth.Role{"web": auth.RoleAdmin}})

	list := "/v1/projects/web/workloads"
	status := func(c require.TestingT, method, path, tok string, body []byte) int {
		resp, _ := g.do(c, method, path, tok, body)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusForbidden, status(t, "GET", list, bob, nil), "bob before he is a member")
	require.Equal(t, http.StatusNotFound, status(t, "GET", "/v1/projects/web", bob, nil), "an unknown project to a non-member")

	doc := api.ProjectDoc{Name: "web", Owner: "alice", Members: []api.Member{
		{Kind: api.MemberUser, Name: "alice", Role: api.RoleAdmin},
		{Kind: api.MemberUser, Name: "bob", Role: api.RoleDeveloper},
		{Kind: api.MemberGroup, Name: "eng", Role: api.RoleViewer},
		{Kind: api.MemberUser, Name: "carl", Role: api.RoleViewer},
	}}
	start := time.Now()
	putProject(t, g.Bus, doc)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, http.StatusOK, status(c, "GET", list, bob, nil))
	}, time.Second, 10*time.Millisecond, "bob's membership did not hold within 1 s")
	t.Logf("membership held after %s", time.Since(start).Round(time.Millisecond))

	resp, body := g.do(t, "GET", "/v1/projects/web", eve, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "a group member reads the project: %s", body)
	var p computeapi.Project
	require.NoError(t, json.Unmarshal(body, &p))
	assert.Equal(t, "viewer", p.Role)
	assert.True(t, p.Registered)
	assert.Len(t, p.Members, 4)

	// The developer and the group's viewer may not manage members; the
	// token's admin may (its call reaches admission, absent here: 503).
	change, _ := json.Marshal(computeapi.MemberChange{Role: "viewer"})
	assert.Equal(t, http.StatusForbidden, status(t, "PUT", "/v1/projects/web/members/zed", bob, change))
	assert.Equal(t, http.StatusForbidden, status(t, "PUT", "/v1/projects/web/members/zed", eve, change))
	assert.Equal(t, http.StatusForbidden, status(t, "DELETE", "/v1/projects/web/members/alice", bob, nil))
	assert.Equal(t, http.StatusForbidden, status(t, "DELETE", "/v1/projects/web", bob, nil))
	bad, _ := json.Marshal(computeapi.MemberChange{Role: "owner"})
	assert.Equal(t, http.StatusUnprocessableEntity, status(t, "PUT", "/v1/projects/web/members/zed", carl, bad), "the token's admin outranks the membership's viewer")

	doc.Members = doc.Members[:1]
	start = time.Now()
	putProject(t, g.Bus, doc)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, http.StatusForbidden, status(c, "GET", list, bob, nil))
	}, time.Second, 10*time.Millisecond, "bob's removal did not hold within 1 s")
	t.Logf("removal held after %s", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, http.StatusNotFound, status(t, "GET", "/v1/projects/web", eve, nil), "a former group member")

	// Listing: bob sees nothing, alice's token sees web with its details.
	alice, _ := a.Mint(auth.Identity{Subject: "alice"})
	resp, body = g.do(t, "GET", "/v1/projects", alice, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var l computeapi.ProjectList
	require.NoError(t, json.Unmarshal(body, &l))
	require.Len(t, l.Items, 1)
	assert.Equal(t, computeapi.Project{Name: "web", Role: "admin", Registered: true, Owner: "alice"}, l.Items[0])
}

func TestCreateProjectIsForPlatformAdmins(t *testing.T) {
	a, err := auth.New(auth.Config{})
	require.NoError(t, err)
	g := newTestGateway(t, gateway.Config{Authenticator: a})
	bob, _ := a.Mint(auth.Identity{Subject: "bob"})
	cases := []struct {
		name   string
		token  string
		body   string
		status int
		field  string
	}{
		{"a user without self-service", bob, `{"name":"web"}`, http.StatusForbidden, ""},
		{"a reserved name", g.Admin, `{"name":"system"}`, http.StatusUnprocessableEntity, "name"},
		{"a name too long", g.Admin, `{"name":"a1234567890123456789012345678901234567890123456789012345678"}`, http.StatusUnprocessableEntity, "name"},
		{"not a DNS label", g.Admin, `{"name":"Web_1"}`, http.StatusUnprocessableEntity, "name"},
		{"no name", g.Admin, `{}`, http.StatusUnprocessableEntity, "name"},
		{"a bad label", g.Admin, `{"name":"web","labels":{"team":"a b"}}`, http.StatusUnprocessableEntity, "labels.team"},
		{"an unknown field", g.Admin, `{"name":"web","quota":1}`, http.StatusBadRequest, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := g.do(t, "POST", "/v1/projects", tc.token, []byte(tc.body))
			require.Equal(t, tc.status, resp.StatusCode, "%s", body)
			var e computeapi.Error
			require.NoError(t, json.Unmarshal(body, &e))
			if tc.field != "" {
				require.Len(t, e.Fields, 1, "%s", body)
				assert.Equal(t, tc.field, e.Fields[0].Field)
			}
		})
	}
}

// TestSelfServiceDoesNotClaimAProjectInUse: a project only tokens name,
// which holds quota (or workloads), is not for a self-service user to
// take.
func TestSelfServiceDoesNotClaimAProjectInUse(t *testing.T) {
	a, err := auth.New(auth.Config{})
	require.NoError(t, err)
	g := newTestGateway(t, gateway.Config{Authenticator: a, SelfServiceProjects: true})
	mallory, _ := a.Mint(auth.Identity{Subject: "mallory"})
	kv, err := g.Bus.KV(context.Background(), bus.BucketQuota)
	require.NoError(t, err)
	ledger, _ := json.Marshal(api.Ledger{Project: "legacy"})
	_, err = kv.Put(context.Background(), api.QuotaProjectKey("legacy"), ledger)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, body := g.do(c, "POST", "/v1/projects", mallory, []byte(`{"name":"legacy"}`))
		assert.Equal(c, http.StatusConflict, resp.StatusCode, "%s", body)
	}, 5*time.Second, 20*time.Millisecond)
	resp, body := g.do(t, "POST", "/v1/projects", mallory, []byte(`{"name":"mine","owner":"alice"}`))
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a self-service project for another owner: %s", body)
}
