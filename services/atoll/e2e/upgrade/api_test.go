package upgrade

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/browsertest"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
)

// TestRotationThroughAPIAndConsole: a plan driven through the Compute API
// and the console, as the gateway's NATS user (bus.Grants: plan.* and
// ctl.* of the upgrade bucket). A tenant is refused; an invalid plan is
// refused naming its field; a plan PUT and paused at once holds, the API
// showing the operator's pause and its reason; the console's Upgrades
// view shows the plan paused with its reason and its cluster and pool,
// and its Resume button (or the API, without Chromium) lets the plan
// rotate every node of the cluster.
func TestRotationThroughAPIAndConsole(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	admin, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.AdminToken))
	require.NoError(t, err)
	tenant, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.Token("upgrade-tenant", false, map[string]string{"rotation": "admin"})))
	require.NoError(t, err)
	cluster := reg.Members[0].Name
	const name, value, reason = "via-api", "api", "console check"

	_, err = tenant.Upgrades(ctx)
	var apiErr *sdk.Error
	require.True(t, errors.As(err, &apiErr), "a tenant must be refused: %v", err)
	require.Equal(t, http.StatusForbidden, apiErr.Status)

	spec := computeapi.RotationPlan{Soak: "2s", DrainDeadline: "1m",
		Clusters: []computeapi.RotationCluster{{Name: cluster, Pools: []computeapi.RotationPool{{Name: "general", MaxUnavailable: "150%"}}}}}
	spec.Target.Label, spec.Target.Value = versionLabel, value
	_, err = admin.PutUpgrade(ctx, name, spec)
	require.True(t, errors.As(err, &apiErr), "an invalid plan must be refused: %v", err)
	require.Equal(t, http.StatusBadRequest, apiErr.Status)
	require.Contains(t, err.Error(), "clusters[0].pools[0].maxUnavailable")

	spec.Clusters[0].Pools[0].MaxUnavailable = "1"
	u, err := admin.PutUpgrade(ctx, name, spec)
	require.NoError(t, err)
	require.Equal(t, name, u.Name)
	t.Cleanup(func() { _, _ = admin.AbortUpgrade(context.Background(), name, "test over") })
	u, err = admin.PauseUpgrade(ctx, name, reason)
	require.NoError(t, err)
	require.True(t, u.Control.Pause)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		u, err := admin.Upgrade(ctx, name)
		if !assert.NoError(ct, err) {
			return
		}
		assert.Equal(ct, "Paused", u.Phase)
		assert.Equal(ct, "operator", u.PausedBy)
		assert.Contains(ct, u.Reason, reason)
		assert.Empty(ct, u.NodesInFlight, "the pause has nothing in flight to finish")
	}, time.Minute, 250*time.Millisecond)
	list, err := admin.Upgrades(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, list)

	resumed := false
	if err := browsertest.Available(); err != nil {
		t.Logf("no console check: %v", err)
	} else {
		consoleResume(t, name, cluster, reason)
		resumed = true
	}
	if !resumed {
		_, err = admin.ResumeUpgrade(ctx, name)
		require.NoError(t, err)
	}
	start := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		u, err := admin.Upgrade(ctx, name)
		if !assert.NoError(ct, err) {
			return
		}
		assert.Equal(ct, "Done", u.Phase, "%s: %s", u.Phase, u.Reason)
	}, 5*time.Minute, time.Second)
	u, err = admin.Upgrade(ctx, name)
	require.NoError(t, err)
	t.Logf("rotated %d nodes of %s through the API in %v", u.NodesDone, cluster, time.Since(start).Round(time.Second))
	require.Equal(t, nodesPerZone, u.NodesDone)
	require.Equal(t, "done", u.Clusters[0].State)
	require.Equal(t, map[string]int{"done": nodesPerZone}, u.Clusters[0].Pools[0].Nodes)
	nodes, err := reg.Env.Cluster(cluster).Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.LabelPool + "=general"})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		require.Equal(t, value, n.Labels[versionLabel], n.Name)
		require.False(t, n.Spec.Unschedulable, "%s left cordoned", n.Name)
	}
}

// consoleResume opens the Upgrades view, waits for the plan paused with
// its reason and its cluster's pool, and resumes it with its button.
func consoleResume(t *testing.T, name, cluster, reason string) {
	t.Helper()
	tab := openConsole(t)
	run, wait := tab.Do, tab.WaitTrue
	card := `document.querySelector('#upgrades-plans .upgrade[data-plan="` + name + `"]')`
	run("sign in and open the Upgrades view", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), reg.AdminToken),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#nav-upgrades")),
		chromedp.Click(chromedp.CSS("#nav-upgrades")),
		chromedp.WaitVisible(chromedp.CSS("#upgrades-view")),
	)
	wait("the paused plan with its reason, cluster and pool",
		`(() => { const c = `+card+`; if (!c || c.dataset.phase !== 'Paused') return false;
		  const r = c.querySelector('.paused-reason');
		  const cl = c.querySelector('.upgrade-cluster[data-cluster="`+cluster+`"]');
		  return !!r && r.textContent.includes('`+reason+`') && !!cl && cl.dataset.state === 'current'
		    && !!cl.querySelector('tr.upgrade-pool[data-pool="general"][data-state="current"]'); })()`)
	if png, err := chromedp.Run(tab.Ctx, chromedp.FullScreenshot(100)); err == nil {
		path := filepath.Join(t.ArtifactDir(), "upgrades-console.png")
		if os.WriteFile(path, png, 0o644) == nil {
			t.Logf("screenshot of the Upgrades view: %s", path)
		}
	}
	text, err := chromedp.Run(tab.Ctx, chromedp.Evaluate[string](card+`.innerText`))
	require.NoError(t, err)
	t.Logf("in the console: %q", text)
	run("resume the plan from the console", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#upgrades-plans .upgrade[data-plan="`+name+`"] button[data-op="resume"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
	)
	wait("the plan no longer paused", `(() => { const c = `+card+`; return !!c && c.dataset.phase !== 'Paused'; })()`)
}

// openConsole starts a headless Chromium with a fresh profile and opens
// its one tab; the page must throw nothing.
func openConsole(t *testing.T) *browsertest.Tab {
	t.Helper()
	return browsertest.Open(t, browsertest.Options{})
}
