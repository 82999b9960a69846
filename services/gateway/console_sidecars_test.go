package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/browsertest"
	"atoll.dev/libs/bus"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// TestConsoleSidecarsPage: the platform admins' page of the managed
// sidecars shows the current version and its history, the rollout's
// progress per zone and per workload (moving, behind, per version), and
// Pause, Resume and Abort change the rollout's control; without zones in
// the progress it says so; a project admin has no link to it and is
// refused.
func TestConsoleSidecarsPage(t *testing.T) {
	browsertest.Skip(t)
	g := newTestGateway(t, gateway.Config{RatePerSecond: 1000, Burst: 1000})
	ctx := t.Context()
	for _, image := range []string{"log:1", "log:2"} {
		resp, body := g.do(t, "PUT", "/v1/admin/sidecars", g.Admin,
			[]byte(`{"sidecars":[{"name":"log","image":"`+image+`","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}],"rollout":{"maxUnavailable":2,"bakeSeconds":30,"onFailure":"Rollback"}}`))
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	}
	// Workloads as admission writes them: one behind on version 1.
	wkv, err := g.Bus.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	for _, w := range []struct {
		name string
		v    int64
	}{{"old", 1}, {"web", 2}, {"api", 2}} {
		doc := api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp,
			Metadata: api.Metadata{Project: "p", Name: w.name, UID: w.name, Generation: 1, SidecarVersion: w.v},
			Spec:     &api.AppSpec{Common: api.Common{Template: api.PodTemplate{Containers: []api.Container{{Name: "a", Image: "a"}}}}}}
		b, _ := json.Marshal(&doc)
		_, err := wkv.Put(ctx, doc.Key(), b)
		require.NoError(t, err)
	}
	// The rollout's progress as admission's controller writes it, with
	// the zones it reports.
	skv, err := g.Bus.KV(ctx, bus.BucketSidecars)
	require.NoError(t, err)
	now := time.Now().UTC()
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	progress := fmt.Sprintf(`{"version":2,"phase":"Progressing","done":1,"updated":%q,
		"moving":[{"key":"p.app.web","from":1,"generation":2,"started":%q,"readySince":%q},{"key":"p.app.api","from":1,"generation":3,"started":%q}],
		"zones":[{"name":"a","phase":"Done","started":%q,"readySince":%q,"finished":%q,"workloads":3,"healthy":3},
		{"name":"b","phase":"Moving","started":%q,"workloads":3,"healthy":1,"through":"shop.app.web"},{"name":"c","phase":"Pending"}]}`,
		at(0), at(-time.Minute), at(-30*time.Second), at(-time.Minute), at(-5*time.Minute), at(-4*time.Minute), at(-2*time.Minute), at(-time.Minute))
	_, err = skv.Put(ctx, api.SidecarProgressKey, []byte(progress))
	require.NoError(t, err)

	tab := consoleTab(t)
	wait := func(what, expr string) {
		t.Helper()
		c, cancel := context.WithTimeout(tab, 30*time.Second)
		defer cancel()
		if _, err := chromedp.Run(c, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
			text, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('main').innerText`))
			t.Fatalf("console: %s: %v\npage:\n%.3000s", what, err, text)
		}
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(tab, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(c, steps...), what)
	}
	rows := func(sel string) []string {
		t.Helper()
		got, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll(`+jsString(sel)+`)].map((r) => r.innerText.replace(/\s+/g, ' ').trim())`))
		require.NoError(t, err, sel)
		return got
	}
	field := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(tab, chromedp.Evaluate[string](`(document.querySelector(`+jsString(sel)+`) || {innerText: ''}).innerText`))
		require.NoError(t, err, sel)
		return s
	}
	control := func() api.SidecarControl {
		t.Helper()
		var c api.SidecarControl
		e, err := skv.Get(ctx, api.SidecarControlKey)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(e.Value(), &c))
		return c
	}

	run("sign in as a platform admin",
		chromedp.Navigate(g.URL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), g.Admin),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#nav-sidecars")),
		chromedp.Click(chromedp.CSS("#nav-sidecars")),
	)
	wait("the page drawn", `document.querySelector('#sidecars-status').textContent.startsWith('live')
		&& document.querySelectorAll('#sidecars-zones tr[data-zone]').length === 3 && document.querySelectorAll('#sidecars-behind tr[data-workload]').length === 1`)
	assert.Equal(t, "2", attr(t, tab, "#sidecars-current", "data-version"))
	assert.Equal(t, "2", field(`#sidecars-current dd[data-field="version"]`))
	assert.Equal(t, "at most 2 workloads at once · bake 30s · on failure Rollback", field(`#sidecars-current dd[data-field="rollout"]`))
	assert.Equal(t, []string{"log log:2 cpu 10m · memory 16Mi every kind every project"}, rows("#sidecars-list tbody tr[data-sidecar]"))
	history, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#sidecars-history tr[data-version]')].map((r) => r.dataset.version + ' ' + r.cells[3].innerText)`))
	require.NoError(t, err)
	assert.Equal(t, []string{"2 log=log:2", "1 log=log:1"}, history, "the history, newest first")

	assert.Equal(t, "Progressing", attr(t, tab, "#sidecars-rollout", "data-phase"))
	assert.Equal(t, "2 of 3 workloads on version 2 · 1 moved and baked · 2 moving · 0 rolled back", field(`#sidecars-rollout dd[data-field="progress"]`))
	zones, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#sidecars-zones tr[data-zone]')].map((r) =>
		r.dataset.zone + ' ' + r.dataset.phase + ' ' + r.querySelector('td[data-field="healthy"]').textContent + ' ' +
		r.querySelector('td[data-field="open"]').textContent + ' ' +
		['started', 'ready', 'finished'].map((f) => r.querySelector('td[data-field="' + f + '"]').textContent === '—' ? '-' : f).join(','))`))
	require.NoError(t, err)
	assert.Equal(t, []string{"a Done 3/3 all started,ready,finished", "b Moving 1/3 through shop.app.web started,-,-", "c Pending — — -,-,-"}, zones, "the zones in rollout order")
	assert.True(t, hidden(t, tab, "#sidecars-zones-none"))
	moving, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#sidecars-moving tr[data-workload]')].map((r) =>
		r.dataset.workload + ' ' + r.dataset.ready + ' ' + r.querySelector('a').getAttribute('href'))`))
	require.NoError(t, err)
	assert.Equal(t, []string{"p.app.web true #/p/p/app/web", "p.app.api false #/p/p/app/api"}, moving, "the workloads being moved, linked")
	assert.Equal(t, []string{"p/App/old 1"}, rows("#sidecars-behind tr[data-workload]"))
	assert.Equal(t, []string{"1 1", "2 2"}, rows("#sidecars-versions tr[data-version]"))
	assert.True(t, hidden(t, tab, "#sidecars-paused"), "no pause shown before one")
	screenshot(t, tab, "sidecars-page.png")

	// Pause with a reason, then resume, then abort, each confirmed.
	run("pause", chromedp.SendKeys(chromedp.CSS("#sidecars-reason"), "log shipper crashes"),
		chromedp.Click(chromedp.CSS("#sidecars-pause")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")))
	wait("the pause shown", `(() => { const p = document.querySelector('#sidecars-paused');
		return !p.hidden && p.dataset.paused === 'true' && p.textContent === 'paused · reason: log shipper crashes'; })()`)
	c := control()
	assert.True(t, c.Paused)
	assert.Equal(t, "log shipper crashes", c.Reason)

	run("resume", chromedp.Click(chromedp.CSS("#sidecars-resume")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")))
	wait("the pause lifted", `document.querySelector('#sidecars-paused').dataset.paused === 'false' && document.querySelector('#sidecars-paused').hidden`)
	c = control()
	assert.False(t, c.Paused)
	assert.Equal(t, 1, c.ResumeSeq)

	run("abort, cancelled first", chromedp.Click(chromedp.CSS("#sidecars-abort")), chromedp.WaitVisible(chromedp.CSS("#confirm-cancel")), chromedp.Click(chromedp.CSS("#confirm-cancel")))
	assert.Zero(t, control().Aborted, "a cancelled abort aborts nothing")
	run("abort", chromedp.Click(chromedp.CSS("#sidecars-abort")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")))
	wait("the abort shown", `document.querySelector('#sidecars-paused').textContent.startsWith('version 2 aborted')`)
	assert.Equal(t, int64(2), control().Aborted)
	assert.Empty(t, field("#sidecars-op-error")+field("#sidecars-error"), "the console showed an error")

	// A progress without zones (a rollout controller that reports none).
	_, err = skv.Put(ctx, api.SidecarProgressKey, fmt.Appendf(nil, `{"version":2,"phase":"Complete","done":3,"updated":%q}`, at(0)))
	require.NoError(t, err)
	wait("no zones reported", `document.querySelector('#sidecars-rollout').dataset.phase === 'Complete'
		&& document.querySelector('#sidecars-zones').hidden && !document.querySelector('#sidecars-zones-none').hidden
		&& document.querySelector('#sidecars-moving').hidden && !document.querySelector('#sidecars-moving-none').hidden`)

	// A project admin: no link, and the page says it is refused.
	projectAdmin, _ := g.GW.Auth().Mint(auth.Identity{Subject: "alice", Roles: map[string]auth.Role{"p": auth.RoleAdmin}})
	run("sign in as a project admin",
		chromedp.Click(chromedp.CSS("#signout")),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), projectAdmin),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#whoami")),
	)
	assert.True(t, hidden(t, tab, "#nav-sidecars"), "a project admin has no link to the sidecars")
	_, err = chromedp.Run(tab, chromedp.Evaluate[string](`(location.hash = '#/sidecars')`))
	require.NoError(t, err)
	wait("the refusal", `!document.querySelector('#sidecars-error').hidden && document.querySelector('#sidecars-status').textContent === ''`)
	assert.Equal(t, []string{}, rows("#sidecars-history tr[data-version]"), "nothing of the sidecars drawn for a project admin")
}
