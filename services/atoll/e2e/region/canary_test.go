package region_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/cli"
	"atoll.dev/services/atoll/e2e"
)

// runCanary runs `atoll canary` in process against the region's gateway,
// away from the user's config and environment, and returns its standard
// output and exit code.
func runCanary(t *testing.T, args ...string) (stdout string, code int) {
	t.Helper()
	t.Setenv(cli.EnvConfig, filepath.Join(t.TempDir(), "config.yaml"))
	for _, k := range []string{cli.EnvServer, cli.EnvToken, cli.EnvProject} {
		t.Setenv(k, "")
	}
	var out, errOut bytes.Buffer
	root := cli.Root()
	root.SetArgs(append([]string{"canary", "--server", reg.GatewayURL, "--interval", "0"}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	err := root.ExecuteContext(ctx)
	var exit *cli.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.Code
	default:
		code = 1
	}
	t.Logf("$ atoll canary %s (%v, exit %d, err %v)\n%s%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), code, err, out.String(), errOut.String())
	return out.String(), code
}

// noApps fails the test if the project still has an App.
func noApps(t *testing.T, project string) {
	t.Helper()
	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.AdminToken))
	require.NoError(t, err)
	ws, err := c.ListAll(context.Background(), project, computeapi.ListWorkloadsParams{Kind: "App"})
	require.NoError(t, err)
	for _, w := range ws {
		t.Errorf("App %s left behind in project %s", w.Metadata.Name, project)
	}
}

// TestCanary runs two rounds of the canary as a developer of its project,
// checking every zone: each passes, and nothing is left behind.
func TestCanary(t *testing.T) {
	e2e.Need(t)
	const project = "canary-team"
	dev := reg.Token("canary-dev", false, map[string]string{project: "developer"})
	out, code := runCanary(t, "--token", dev, "-p", project, "--rounds", "2", "--zones", "a,b,c", "--timeout", "60s")
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	for _, want := range []string{"round 1 ok ", "round 2 ok ", "zones=a,b,c ", " wait-running=", " scale=", " logs=", " events=", " delete=", "canary: 2/2 rounds ok (100.0%)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	noApps(t, project)
}

// TestCanaryFrozenCluster freezes zone-c's API server for a whole round:
// the round fails at wait-running, naming zone c, the command exits 1 and
// the round's App is deleted. The canary runs as a platform admin, so it
// finds the zones itself.
func TestCanaryFrozenCluster(t *testing.T) {
	e2e.Need(t)
	const project = "canary-frozen"
	zc := reg.Env.Cluster("zone-c")
	paused, err := zc.PauseComponent(testenv.KubeAPIServer)
	require.NoError(t, err)
	resumed := false
	defer func() {
		if !resumed {
			_ = paused.Resume()
		}
	}()

	out, code := runCanary(t, "--token", reg.AdminToken, "-p", project, "--rounds", "1", "--timeout", "20s")
	if code == 0 {
		t.Errorf("exit 0 with zone-c frozen, want non-zero")
	}
	for _, want := range []string{"round 1 FAILED step=wait-running ", "zones=a,b,c ", "no ready replica in zone c", `cleanup="deleted"`, "canary: 0/1 rounds ok (0.0%)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	noApps(t, project)

	require.NoError(t, paused.Resume())
	resumed = true
	// Let the inventory see zone-c healthy again before the next test.
	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.AdminToken))
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cs, err := c.Clusters(context.Background())
		if !assert.NoError(ct, err) {
			return
		}
		for _, cl := range cs {
			assert.True(ct, cl.Healthy, "cluster %s healthy", cl.Name)
		}
	}, 90*time.Second, 250*time.Millisecond)
	// No object of the round is left in any member cluster.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, mc := range reg.Env.Clusters {
			ds, err := mc.Client.AppsV1().Deployments(api.Namespace(project)).List(context.Background(), metav1.ListOptions{})
			if assert.NoError(ct, err, "list Deployments of %s", mc.Name) {
				assert.Empty(ct, ds.Items, "Deployments left in %s", mc.Name)
			}
		}
	}, 90*time.Second, 250*time.Millisecond)
}
