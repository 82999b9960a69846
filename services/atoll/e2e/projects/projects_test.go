package projects

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/atoll/e2e"
)

// roleDeadline is how soon a membership change must hold at every
// gateway replica.
const roleDeadline = time.Second

// client is an SDK client of one gateway replica as the holder of tok,
// without retries: a poll measures each answer.
func client(t *testing.T, url, tok string) *sdk.Client {
	t.Helper()
	c, err := sdk.New(url, sdk.WithToken(tok), sdk.WithTimeout(5*time.Second), sdk.WithRetry(1, 0, 0))
	require.NoError(t, err)
	return c
}

// gateways returns a client of every gateway replica as the holder of tok.
func gateways(t *testing.T, tok string) []*sdk.Client {
	t.Helper()
	var out []*sdk.Client
	for i, url := range reg.GatewayURLs() {
		require.NotEmpty(t, url, "gateway replica %d has no address", i)
		out = append(out, client(t, url, tok))
	}
	require.Len(t, out, 2, "the region runs two gateway replicas")
	return out
}

func appDoc(name string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":%q},
"spec":{"replicas":1,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`, name)
}

// status is err's HTTP status: 201 for none, 0 for a failure without one.
func status(err error) int {
	var e *sdk.Error
	switch {
	case err == nil:
		return 201
	case errors.As(err, &e):
		return e.Status
	}
	return 0
}

// untilEvery has bob create Apps (named prefix-<replica>-<n>) at every
// gateway replica at once, each until a create answers want, and returns
// how long after since each replica took; it fails when a replica takes
// longer than roleDeadline. Every App created is in created.
func untilEvery(t *testing.T, bob []*sdk.Client, since time.Time, want int, prefix string, created *[]string) []time.Duration {
	t.Helper()
	took := make([]time.Duration, len(bob))
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for i, c := range bob {
		wg.Go(func() {
			for n := 0; ; n++ {
				name := fmt.Sprintf("%s-%d-%d", prefix, i, n)
				_, err := c.CreateWorkloadJSON(context.Background(), "web", appDoc(name), "")
				got := status(err)
				if got == 201 {
					mu.Lock()
					*created = append(*created, name)
					mu.Unlock()
				}
				if got == want {
					took[i] = time.Since(since)
					return
				}
				if got != 201 && got != 403 {
					t.Errorf("replica %d: create %s: %v", i, name, err)
					return
				}
				if time.Since(since) > 3*roleDeadline {
					took[i] = time.Since(since)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	for i, d := range took {
		assert.LessOrEqual(t, d, roleDeadline, "replica %d answered %d only after %s", i, want, d)
	}
	return took
}

// TestMembersRolesHoldAtEveryGatewayWithinASecond: a platform admin
// creates web for alice; alice adds bob as developer and bob creates Apps
// at both gateway replicas within a second, and is refused within a
// second of his removal; the last admin stays; a viewer may not add
// members; a project with workloads is not deleted.
func TestMembersRolesHoldAtEveryGatewayWithinASecond(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := client(t, reg.GatewayURL, reg.AdminToken)
	alice := client(t, reg.GatewayURL, reg.Token("alice", false, nil))
	bobTok := reg.Token("bob", false, nil)
	bob := gateways(t, bobTok)
	carol := client(t, reg.GatewayURL, reg.Token("carol", false, nil))

	p, err := admin.CreateProject(ctx, computeapi.ProjectCreate{Name: "web", Owner: "alice", DisplayName: "Web", Labels: map[string]string{"team": "web", "cost-center": "cc-42"}})
	require.NoError(t, err)
	assert.Equal(t, "alice", p.Owner)
	_, err = admin.CreateProject(ctx, computeapi.ProjectCreate{Name: "web"})
	assert.True(t, sdk.IsConflict(err), "a second web: %v", err)
	_, err = admin.CreateProject(ctx, computeapi.ProjectCreate{Name: "atoll-web"})
	var se *sdk.Error
	if assert.ErrorAs(t, err, &se) && assert.Equal(t, 422, se.Status) && assert.Len(t, se.Body.Fields, 1) {
		assert.Equal(t, "name", se.Body.Fields[0].Field)
	}

	got, err := alice.Project(ctx, "web")
	require.NoError(t, err)
	assert.Equal(t, "admin", got.Role, "the owner is the project's admin")
	q, err := alice.Quota(ctx, "web")
	require.NoError(t, err)
	for _, tq := range q.Tiers {
		assert.True(t, tq.Default, "a new project's %s quota is the region's default", tq.Tier)
	}

	for i, c := range bob {
		_, err := c.CreateWorkloadJSON(ctx, "web", appDoc(fmt.Sprintf("early-%d", i)), "")
		require.True(t, sdk.IsForbidden(err), "replica %d: bob before he is a member: %v", i, err)
	}
	var created []string
	sent := time.Now()
	_, err = alice.SetMember(ctx, "web", "user", "bob", "developer")
	require.NoError(t, err)
	added := time.Now()
	took := untilEvery(t, bob, added, 201, "added", &created)
	t.Logf("bob's first App after being added: %v after the change was stored (the call took %s), at replicas 0 and 1",
		took, added.Sub(sent).Round(time.Millisecond))

	_, err = client(t, reg.GatewayURL, bobTok).SetMember(ctx, "web", "user", "carol", "viewer")
	assert.True(t, sdk.IsForbidden(err), "a developer adds a member: %v", err)
	_, err = alice.SetMember(ctx, "web", "user", "carol", "viewer")
	require.NoError(t, err)
	_, err = carol.SetMember(ctx, "web", "user", "dave", "developer")
	assert.True(t, sdk.IsForbidden(err), "a viewer adds a member: %v", err)
	assert.True(t, sdk.IsForbidden(carol.RemoveMember(ctx, "web", "user", "bob")), "a viewer removes a member")

	sent = time.Now()
	require.NoError(t, alice.RemoveMember(ctx, "web", "user", "bob"))
	removed := time.Now()
	took = untilEvery(t, bob, removed, 403, "removed", &created)
	t.Logf("bob's first refusal after being removed: %v after the change was stored (the call took %s)", took, removed.Sub(sent).Round(time.Millisecond))

	err = alice.RemoveMember(ctx, "web", "user", "alice")
	assert.True(t, sdk.IsConflict(err), "removing the last admin: %v", err)
	_, err = alice.SetMember(ctx, "web", "user", "alice", "viewer")
	assert.True(t, sdk.IsConflict(err), "demoting the last admin: %v", err)
	ms, err := alice.Members(ctx, "web")
	require.NoError(t, err)
	assert.Equal(t, []string{"user alice admin", "user carol viewer"}, memberLines(ms))

	err = alice.DeleteProject(ctx, "web")
	assert.True(t, sdk.IsConflict(err), "deleting a project with %d Apps: %v", len(created), err)
	for _, name := range created {
		require.NoError(t, alice.Delete(ctx, "web", "App", name))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, alice.DeleteProject(ctx, "web"))
	}, 10*time.Second, 100*time.Millisecond, "deleting the emptied project")
	_, err = admin.Project(ctx, "web")
	assert.True(t, sdk.IsNotFound(err), "web after its deletion: %v", err)
}

func memberLines(ms []computeapi.Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Kind+" "+m.Name+" "+m.Role)
	}
	return out
}

// TestSelfServiceProjects: with self-service on, a plain user creates
// projects it owns and administers, up to the limit.
func TestSelfServiceProjects(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sam := client(t, reg.GatewayURL, reg.Token("sam", false, nil))
	_, err := sam.CreateProject(ctx, computeapi.ProjectCreate{Name: "sam-x", Owner: "alice"})
	assert.True(t, sdk.IsForbidden(err), "a self-service project for another owner: %v", err)
	for i := 1; i <= maxPerUser; i++ {
		name := fmt.Sprintf("sam-%d", i)
		p, err := sam.CreateProject(ctx, computeapi.ProjectCreate{Name: name})
		require.NoError(t, err, name)
		assert.Equal(t, "sam", p.Owner)
		assert.Equal(t, "admin", p.Role)
		assert.True(t, p.SelfService)
		_, err = sam.SetMember(ctx, name, "group", "sam-team", "developer")
		assert.NoError(t, err, "the owner manages %s's members", name)
	}
	_, err = sam.CreateProject(ctx, computeapi.ProjectCreate{Name: "sam-too-many"})
	var se *sdk.Error
	if assert.ErrorAs(t, err, &se, "project %d of %d", maxPerUser+1, maxPerUser) {
		assert.Equal(t, 409, se.Status)
		assert.Equal(t, "ProjectLimitReached", se.Body.Code)
	}
	ps, err := sam.Projects(ctx)
	require.NoError(t, err)
	var names []string
	for _, p := range ps {
		names = append(names, p.Name+" "+p.Role)
	}
	assert.Equal(t, []string{"sam-1 admin", "sam-2 admin"}, names)
}
