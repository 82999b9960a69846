package projects

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/atoll/e2e"
)

// revokeDeadline is how soon a revoked project token must be refused at
// every gateway replica.
const revokeDeadline = time.Second

// listStatus is the status of a workload list by c in project: 200, or
// the error's status.
func listStatus(ctx context.Context, c *sdk.Client, project string) int {
	_, err := c.List(ctx, project, computeapi.ListWorkloadsParams{})
	if err == nil {
		return 200
	}
	return status(err)
}

// untilRefused polls every client until its list answers 401, and
// returns how long after since each took (at most limit, then it stops).
func untilRefused(ctx context.Context, cs []*sdk.Client, project string, since time.Time, limit time.Duration) []time.Duration {
	took := make([]time.Duration, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			for listStatus(ctx, c, project) != 401 && time.Since(since) < limit {
				time.Sleep(5 * time.Millisecond)
			}
			took[i] = time.Since(since)
		})
	}
	wg.Wait()
	return took
}

// TestProjectTokens: a project admin creates tokens for machines, which
// act in their project with their role at every gateway replica; they
// are listed without their secrets and with their last use; a token with
// a 2 s lifetime stops working after 2 s, and a revoked one within a
// second at each of the two gateway replicas.
func TestProjectTokens(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := client(t, reg.GatewayURL, reg.AdminToken)
	alice := client(t, reg.GatewayURL, reg.Token("alice", false, nil))
	_, err := admin.CreateProject(ctx, computeapi.ProjectCreate{Name: "machines", Owner: "alice"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.DeleteProject(context.WithoutCancel(ctx), "machines") })

	// A token with a 2 s lifetime works until then, and not after.
	short, err := alice.CreateToken(ctx, "machines", "short", "developer", 2*time.Second)
	require.NoError(t, err)
	require.NotEmpty(t, short.Secret)
	shortAt := gateways(t, short.Secret)
	for i, c := range shortAt {
		require.EventuallyWithT(t, func(c2 *assert.CollectT) {
			assert.Equal(c2, 200, listStatus(ctx, c, "machines"))
		}, time.Second, 10*time.Millisecond, "replica %d: the new token", i)
	}
	_, err = shortAt[0].CreateWorkloadJSON(ctx, "machines", appDoc("by-token"), "")
	require.NoError(t, err, "a developer token creates an App")
	require.True(t, time.Now().Before(short.Expires), "the token expired before it was checked; the checks took over 2s")
	took := untilRefused(ctx, shortAt, "machines", short.Expires, 3*time.Second)
	for i, d := range took {
		// Refused at its expiry: the first poll after it is refused.
		assert.LessOrEqual(t, d, 200*time.Millisecond, "replica %d refused the expired token %s after its expiry", i, d)
	}
	t.Logf("the 2s token was refused %v after its expiry at replicas 0 and 1", took)

	// A revoked token is refused within a second at every replica.
	ci, err := alice.CreateToken(ctx, "machines", "ci", "viewer", time.Hour)
	require.NoError(t, err)
	ciAt := gateways(t, ci.Secret)
	for i, c := range ciAt {
		require.EventuallyWithT(t, func(c2 *assert.CollectT) {
			assert.Equal(c2, 200, listStatus(ctx, c, "machines"))
		}, time.Second, 10*time.Millisecond, "replica %d: the new token", i)
	}
	_, err = ciAt[1].CreateWorkloadJSON(ctx, "machines", appDoc("by-viewer"), "")
	assert.True(t, sdk.IsForbidden(err), "a viewer token creates an App: %v", err)

	ts, err := alice.Tokens(ctx, "machines")
	require.NoError(t, err)
	require.Len(t, ts, 2)
	for _, tok := range ts {
		assert.Empty(t, tok.Secret, "a listed token shows its secret")
		assert.Equal(t, "alice", tok.CreatedBy)
	}
	assert.Equal(t, []string{"ci viewer", "short developer"}, []string{ts[0].Name + " " + ts[0].Role, ts[1].Name + " " + ts[1].Role})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ts, err := alice.Tokens(ctx, "machines")
		if assert.NoError(c, err) && assert.Len(c, ts, 2) {
			assert.False(c, ts[0].LastUsed.IsZero(), "ci's last use")
		}
	}, 5*time.Second, 50*time.Millisecond, "the token's use is recorded")

	sent := time.Now()
	require.NoError(t, alice.RevokeToken(ctx, "machines", "ci"))
	revoked := time.Now()
	took = untilRefused(ctx, ciAt, "machines", revoked, 3*revokeDeadline)
	for i, d := range took {
		assert.LessOrEqual(t, d, revokeDeadline, "replica %d refused the revoked token only after %s", i, d)
	}
	t.Logf("the revoked token was refused %v after the revocation was stored (the call took %s), at replicas 0 and 1",
		took, revoked.Sub(sent).Round(time.Millisecond))
	assert.True(t, sdk.IsNotFound(alice.RevokeToken(ctx, "machines", "ci")), "revoking it again")
	_, err = alice.CreateToken(ctx, "machines", "short", "developer", time.Hour)
	assert.True(t, sdk.IsConflict(err), "a second token named short: %v", err)
	require.NoError(t, alice.Delete(ctx, "machines", "App", "by-token"))
}
