package remediation

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

	"atoll.dev/libs/browsertest"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/atoll/e2e"
	rem "atoll.dev/services/remediation"
)

// TestRemediationInAPIAndConsole: the Compute API and the console show
// remediation. A cluster paused through the API holds a broken node,
// which GET /v1/remediation lists with its phase and the pause as the
// reason it waits; a tenant is refused; the console's Remediation view
// shows the paused cluster, its breakers and the node, and its Resume
// button lets the escalation start (the node is cordoned).
func TestRemediationInAPIAndConsole(t *testing.T) {
	e2e.Need(t)
	setPolicy(t, basePolicy())
	const cluster, reason = "zone-b", "api maintenance"
	const why = "paused (cluster): " + reason
	healAll(t, cluster)
	c := member(t, cluster)
	ctx := context.Background()
	admin, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.AdminToken))
	require.NoError(t, err)
	tenant, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.Token("rem-tenant", false, map[string]string{"rem-api": "admin"})))
	require.NoError(t, err)

	_, err = tenant.Remediation(ctx, "")
	var apiErr *sdk.Error
	require.True(t, errors.As(err, &apiErr), "a tenant must be refused: %v", err)
	require.Equal(t, http.StatusForbidden, apiErr.Status)

	paused, err := admin.PauseRemediation(ctx, cluster, reason)
	require.NoError(t, err)
	require.Len(t, paused, 1)
	require.Equal(t, why, paused[0].Paused, "the pause shows in the status the API answers")
	t.Cleanup(func() { _, _ = admin.ResumeRemediation(context.Background(), cluster) })

	victim := nodesOfPool(t, c.Client, "general")[1].Name
	evs := watchEvents(t, cluster)
	breakNode(t, c.Client, victim)
	var seen computeapi.RemediationNode
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		list, err := admin.Remediation(ctx, cluster)
		if !assert.NoError(ct, err) || !assert.Len(ct, list, 1) {
			return
		}
		assert.Equal(ct, why, list[0].Paused)
		assert.NotEmpty(ct, list[0].Breakers, "the breaker state per domain")
		for _, n := range list[0].Nodes {
			if n.Node == victim {
				seen = n
			}
		}
		assert.Equal(ct, string(rem.PhaseUnhealthy), seen.Phase)
		assert.Equal(ct, "Ready=False", seen.Signal)
		assert.Equal(ct, why, seen.Waiting)
		assert.False(ct, seen.UnhealthySince.IsZero())
		assert.NotEmpty(ct, seen.History)
	}, 30*time.Second, 200*time.Millisecond)
	t.Logf("in the API: %s %s %q since %s, %d history entries", seen.Node, seen.Phase, seen.Waiting,
		seen.UnhealthySince.Format(time.TimeOnly), len(seen.History))

	if err := browsertest.Available(); err != nil {
		// The API half above stands alone; the console half needs the browser.
		t.Logf("no console check: %v", err)
		return
	}
	tab := openConsole(t)
	run, wait := tab.Do, tab.WaitTrue
	card := `document.querySelector('#remediation-clusters .remediation[data-cluster="` + cluster + `"]')`
	run("sign in and open the Remediation view", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), reg.AdminToken),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#nav-remediation")),
		chromedp.Click(chromedp.CSS("#nav-remediation")),
		chromedp.WaitVisible(chromedp.CSS("#remediation-view")),
	)
	wait("the paused cluster with the broken node, its phase and why",
		`(() => { const c = `+card+`; if (!c || c.dataset.paused !== 'true') return false;
		  const r = c.querySelector('tr[data-node="`+victim+`"]');
		  return !!r && r.dataset.phase === 'Unhealthy' && r.querySelector('td.why').textContent.includes('`+reason+`')
		    && c.querySelectorAll('tr[data-domain]').length > 0; })()`)

	// The view as an operator sees it, kept with `go test -artifacts`.
	if png, err := chromedp.Run(tab.Ctx, chromedp.FullScreenshot(100)); err == nil {
		path := filepath.Join(t.ArtifactDir(), "remediation-console.png")
		if os.WriteFile(path, png, 0o644) == nil {
			t.Logf("screenshot of the Remediation view: %s", path)
		}
	}
	row, err := chromedp.Run(tab.Ctx, chromedp.Evaluate[string](card+`.querySelector('tr[data-node="`+victim+`"]').innerText`))
	require.NoError(t, err)
	t.Logf("in the console: %q", row)

	run("resume the cluster from the console", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#remediation-clusters .remediation[data-cluster="`+cluster+`"] button[data-op="resume"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
	)
	wait("the cluster no longer paused", `(() => { const c = `+card+`; return !!c && c.dataset.paused === 'false'; })()`)
	list, err := admin.Remediation(ctx, cluster)
	require.NoError(t, err)
	require.Empty(t, list[0].Paused, "the console's resume reached the service")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, ok := evs.has(victim, rem.EvCordoned)
		assert.True(ct, ok)
	}, 30*time.Second, 200*time.Millisecond)
	wait("the node's escalation in the console",
		`(() => { const r = `+card+`?.querySelector('tr[data-node="`+victim+`"]'); return !!r && r.dataset.phase !== 'Unhealthy'; })()`)
	errs, err := chromedp.Run(tab.Ctx, chromedp.Evaluate[string](`['#remediation-error', '#remediation-op-error'].map((s) => document.querySelector(s).textContent).join('')`))
	require.NoError(t, err)
	require.Empty(t, errs, "the console showed an error")
	t.Logf("resumed from the console; %s cordoned", victim)
}

// openConsole starts a headless Chromium with a fresh profile and opens
// its one tab; the page must throw nothing.
func openConsole(t *testing.T) *browsertest.Tab {
	t.Helper()
	return browsertest.Open(t, browsertest.Options{})
}
