package region_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atoll.dev/libs/browsertest"
	"atoll.dev/services/atoll/e2e"
	"github.com/google/go-cmp/cmp"
)

// TestConsole drives the web console the gateway serves in a real headless
// Chromium: sign in, watch an App come up, read it, and fail to sign in.
func TestConsole(t *testing.T) {
	e2e.Need(t)
	browsertest.Skip(t)
	if reg.GatewayURL == "" {
		t.Fatal("the region runs no gateway")
	}
	b := startChromium(t)
	project := fmt.Sprintf("console-%d", time.Now().UnixNano()%1_000_000)

	t.Run("BadTokenShowsTheErrorAndNoList", func(t *testing.T) {
		const token = "atoll-not-a-token"
		// What the API says to this token, which the page must show.
		status, body := consoleCall(t, http.MethodGet, "/v1/whoami", token, nil)
		if status != http.StatusUnauthorized {
			t.Fatalf("whoami with a bad token: status %d, want 401: %s", status, body)
		}
		var apiErr struct{ Code, Message string }
		if err := json.Unmarshal(body, &apiErr); err != nil || apiErr.Message == "" {
			t.Fatalf("whoami with a bad token: no API error document (%v): %s", err, body)
		}

		tab := b.newTab(t)
		tab.do("sign in with a bad token", 30*time.Second,
			chromedp.Navigate(reg.GatewayURL+"/console/"),
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), token),
			chromedp.Click(chromedp.CSS("#signin")),
			chromedp.WaitVisible(chromedp.CSS("#signin-error")),
		)
		type page struct {
			Error       string `json:"error"`
			ListShown   bool   `json:"listShown"`
			Rows        int    `json:"rows"`
			SignedIn    bool   `json:"signedIn"`
			StoredToken bool   `json:"storedToken"`
		}
		got := evalJS[page](tab, "read the page", `({
			error: document.querySelector('#signin-error').textContent,
			listShown: !document.querySelector('#list-view').hidden,
			rows: document.querySelectorAll('#workloads tbody tr').length,
			signedIn: !document.querySelector('#identity').hidden,
			storedToken: sessionStorage.length > 0,
		})`)
		if want := apiErr.Code + ": " + apiErr.Message; !strings.Contains(got.Error, want) {
			tab.errorf("sign-in error %q, want the API's %q", got.Error, want)
		}
		if got.ListShown || got.Rows != 0 || got.SignedIn || got.StoredToken {
			tab.errorf("after a refused token: list shown %v, %d rows, signed in %v, token stored %v; want none",
				got.ListShown, got.Rows, got.SignedIn, got.StoredToken)
		}
	})

	t.Run("FollowAnApp", func(t *testing.T) {
		subject := "dev@" + project
		token := reg.Token(subject, false, map[string]string{project: "developer"})
		const name = "web"
		path := "/v1/projects/" + project + "/workloads"
		t.Cleanup(func() { consoleCall(t, http.MethodDelete, path+"/App/"+name, token, nil) })

		tab := b.newTab(t)
		// The gateway's root sends a browser to the console.
		tab.do("sign in", 30*time.Second,
			chromedp.Navigate(reg.GatewayURL+"/"),
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), token),
			chromedp.Click(chromedp.CSS("#signin")),
			chromedp.WaitVisible(chromedp.CSS("#identity")),
		)
		type identity struct {
			Subject  string   `json:"subject"`
			Projects []string `json:"projects"`
		}
		id := evalJS[identity](tab, "read the identity", `({
			subject: document.querySelector('#whoami').textContent,
			projects: [...document.querySelectorAll('#project-list option')].map(o => o.value),
		})`)
		if diff := cmp.Diff(identity{Subject: subject, Projects: []string{project}}, id); diff != "" {
			tab.errorf("signed-in identity (-want +got):\n%s", diff)
		}

		// Pick the project: its list is empty so far, and no error shows.
		tab.do("open the project", 30*time.Second,
			chromedp.SetValue(chromedp.CSS("#project"), project),
			chromedp.Click(chromedp.CSS("#project-open")),
			chromedp.WaitVisible(chromedp.CSS("#workloads-empty")),
		)
		if errs := visibleErrors(tab); errs != "" {
			tab.fatalf("errors on an empty project: %s", errs)
		}

		// An App submitted through the API appears in the open page and turns Running.
		doc := fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":%q},
"spec":{"replicas":3,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"50m","memory":"32Mi"}}}]}}}`, name)
		if status, body := consoleCall(t, http.MethodPost, path, token, []byte(doc)); status != http.StatusCreated {
			t.Fatalf("create the App: status %d: %s", status, body)
		}
		type row struct {
			Phase   string `json:"phase"`
			Ready   string `json:"ready"`
			Desired string `json:"desired"`
		}
		running := pollJS[row](tab, "the App in the list, Running 3/3", 2*time.Minute, `(() => {
			const tr = document.querySelector('#workloads tbody tr[data-workload="app/web"]');
			const phase = tr?.querySelector('[data-phase]');
			const ready = tr?.querySelector('[data-ready]');
			if (phase?.dataset.phase !== 'Running' || ready.dataset.ready !== '3') return null;
			return {phase: phase.dataset.phase, ready: ready.dataset.ready, desired: ready.dataset.desired};
		})()`)
		if diff := cmp.Diff(row{Phase: "Running", Ready: "3", Desired: "3"}, running); diff != "" {
			tab.errorf("list row (-want +got):\n%s", diff)
		}

		// Its page: phase, replicas per zone, events, logs.
		tab.do("open the App", 30*time.Second,
			chromedp.Click(chromedp.CSS(`#workloads tr[data-workload="app/web"] td.name a`)),
			chromedp.WaitVisible(chromedp.CSS("#detail-view")),
			chromedp.WaitVisible(chromedp.CSS(`#detail-phase[data-phase="Running"]`)),
		)
		zones := readZones(tab, 3)
		if diff := cmp.Diff(map[string]zoneCounts{"a": {1, 1}, "b": {1, 1}, "c": {1, 1}}, zones); diff != "" {
			tab.errorf("replicas per zone (-want +got):\n%s", diff)
		}
		events := pollJS[[]string](tab, "admitted and running in the events", time.Minute, eventsExpr(`e.includes('admitted') && e.includes('running')`))
		if i, j := slices.Index(events, "admitted"), slices.Index(events, "running"); i > j {
			tab.errorf("events %v: admitted after running", events)
		}

		// Live: a change made elsewhere reaches the open page, its status
		// through polling and its event through the watch.
		doc6 := strings.Replace(doc, `"replicas":3`, `"replicas":6`, 1)
		if status, body := consoleCall(t, http.MethodPut, path+"/App/"+name, token, []byte(doc6)); status != http.StatusOK {
			t.Fatalf("scale the App to 6: status %d: %s", status, body)
		}
		zones = readZones(tab, 6)
		if diff := cmp.Diff(map[string]zoneCounts{"a": {2, 2}, "b": {2, 2}, "c": {2, 2}}, zones); diff != "" {
			tab.errorf("replicas per zone after scaling to 6 (-want +got):\n%s", diff)
		}
		pollJS[[]string](tab, "the update in the events, live", time.Minute, eventsExpr(`e.includes('updated')`))

		// The live log tail shows lines of the App's pods, and no error.
		checkLogTail(tab, path+"/App/"+name+"/logs?tail=100", token)
		if errs := visibleErrors(tab); errs != "" {
			tab.errorf("errors on the App's page: %s", errs)
		}

		// Another project: the API's refusal shows, and no list.
		const other = "console-not-mine"
		status, body := consoleCall(t, http.MethodGet, "/v1/projects/"+other+"/workloads", token, nil)
		var refusal struct{ Code, Message string }
		if err := json.Unmarshal(body, &refusal); status != http.StatusForbidden || err != nil {
			t.Fatalf("list another project: status %d, want 403: %s", status, body)
		}
		tab.do("open another project", 30*time.Second,
			chromedp.SetValue(chromedp.CSS("#project"), other),
			chromedp.Click(chromedp.CSS("#project-open")),
			chromedp.WaitVisible(chromedp.CSS("#list-error")),
		)
		shown := evalJS[string](tab, "read the list error", `document.querySelector('#list-error').textContent`)
		if want := refusal.Code + ": " + refusal.Message; !strings.Contains(shown, want) {
			tab.errorf("list error %q, want the API's %q", shown, want)
		}
		if n := evalJS[int](tab, "count rows", `document.querySelectorAll('#workloads tbody tr').length`); n != 0 {
			tab.errorf("%d rows listed for a project without a role", n)
		}

		// Sign out: the token and the data leave the page.
		tab.do("sign out", 30*time.Second,
			chromedp.Click(chromedp.CSS("#signout")),
			chromedp.WaitVisible(chromedp.CSS("#signin-view")),
		)
		if left := evalJS[int](tab, "read the storage", `sessionStorage.length + document.querySelectorAll('#workloads tbody tr, #events li, #logs .log-line').length`); left != 0 {
			tab.errorf("%d stored tokens, rows, events or log lines left after signing out", left)
		}
	})
}

// TestConsoleForOperators drives the console's operator side in a real
// headless Chromium: a platform admin picks a project from the list of
// projects, scales, pauses, resumes, stops and starts an App with its
// buttons (each confirmed in the dialog) and sees each result, sees the
// API's refusal of a restart while stopped, reads the region page (every
// cluster by zone with its capacity bars; cordon and uncordon) and the SLI
// charts, and deletes the App; a viewer's pause shows the API's 403.
func TestConsoleForOperators(t *testing.T) {
	e2e.Need(t)
	browsertest.Skip(t)
	if reg.GatewayURL == "" {
		t.Fatal("the region runs no gateway")
	}
	b := startChromium(t)
	project := fmt.Sprintf("console-ops-%d", time.Now().UnixNano()%1_000_000)
	admin := reg.Token("root@"+project, true, nil)
	viewer := reg.Token("viewer@"+project, false, map[string]string{project: "viewer"})
	path := "/v1/projects/" + project + "/workloads"
	app := path + "/App/web"
	detailHash := "#/p/" + project + "/App/web"
	doc := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":"web"},
"spec":{"replicas":3,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"50m","memory":"32Mi"}}}]}}}`
	if status, body := consoleCall(t, http.MethodPost, path, admin, []byte(doc)); status != http.StatusCreated {
		t.Fatalf("create the App: status %d: %s", status, body)
	}
	t.Cleanup(func() { consoleCall(t, http.MethodDelete, app, admin, nil) })

	tab := b.newTab(t)
	tab.do("sign in as a platform admin", 30*time.Second,
		chromedp.Navigate(reg.GatewayURL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), admin),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#identity")),
	)

	// The platform admin picks from the list of projects, in the top bar
	// and on the projects page, instead of typing a name.
	type picker struct {
		Options  []string `json:"options"`
		Links    []string `json:"links"`
		TextBox  bool     `json:"textBox"`
		Selector bool     `json:"selector"`
	}
	got := pollJS[picker](tab, "the project in the admin's picker", 30*time.Second, fmt.Sprintf(`(() => {
		const p = {
			options: [...document.querySelectorAll('#project-select option')].map(o => o.value).filter(Boolean),
			links: [...document.querySelectorAll('#projects a[data-project]')].map(a => a.dataset.project),
			textBox: !document.querySelector('#project').hidden,
			selector: !document.querySelector('#project-select').hidden,
		};
		return p.options.includes(%[1]q) && p.links.includes(%[1]q) ? p : null;
	})()`, project))
	if got.TextBox || !got.Selector {
		tab.errorf("platform admin's picker: text box shown %v, project list shown %v; want the list only", got.TextBox, got.Selector)
	}
	if !slices.IsSorted(got.Options) {
		tab.errorf("projects in the picker not sorted: %v", got.Options)
	}
	t.Logf("projects in the admin's picker: %v", got.Options)
	tab.do("pick the project", 30*time.Second,
		chromedp.SetValue(chromedp.CSS("#project-select"), project),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#project-select').dispatchEvent(new Event('change'))`),
		chromedp.WaitVisible(chromedp.CSS(`#workloads tr[data-workload="app/web"]`)),
	)
	pollJS[bool](tab, "the App Running 3/3 in the list", 2*time.Minute, `(() => {
		const tr = document.querySelector('#workloads tbody tr[data-workload="app/web"]');
		return tr?.querySelector('[data-phase]').dataset.phase === 'Running' && tr.querySelector('[data-ready]').dataset.ready === '3';
	})()`)
	tab.do("open the App", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#workloads tr[data-workload="app/web"] td.name a`)),
		chromedp.WaitVisible(chromedp.CSS(`#detail-phase[data-phase="Running"]`)),
	)
	readZones(tab, 3)

	// Scale: the dialog offers the current replicas; 5 is confirmed, and
	// the page shows 5 desired and then 5 ready across the zones.
	tab.do("ask to scale", 30*time.Second,
		chromedp.Click(chromedp.CSS("#op-scale")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-replicas")),
	)
	if v := evalJS[string](tab, "read the offered replicas", `document.querySelector('#confirm-replicas').value`); v != "3" {
		tab.errorf("the scale dialog offers %q replicas, want the current 3", v)
	}
	tab.picture("console-scale-dialog")
	tab.do("scale to 5", 30*time.Second,
		chromedp.SetValue(chromedp.CSS("#confirm-replicas"), "5"),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitNotVisible(chromedp.CSS("#confirm")),
	)
	pollJS[bool](tab, "5 desired in the header", time.Minute, `document.querySelector('#detail-ready').dataset.desired === '5'`)
	if zones := readZones(tab, 5); !balanced(zones, 3) {
		tab.errorf("replicas per zone after scaling to 5 with the button: %v, want 1 or 2 in each of 3 zones", zones)
	}
	pollJS[[]string](tab, "the scaled event", time.Minute, eventsExpr(`e.includes('scaled')`))
	if w := getApp(t, app, admin); w.Spec.Replicas != 5 {
		tab.errorf("the API holds %d replicas after scaling to 5 with the button", w.Spec.Replicas)
	}

	// Pause: the App turns Paused and the button offers Resume.
	tab.do("pause", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#op-pause[data-op="pause"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitNotVisible(chromedp.CSS("#confirm")),
	)
	pollJS[bool](tab, "Paused, with Resume offered", 2*time.Minute,
		`document.querySelector('#detail-phase').dataset.phase === 'Paused' && document.querySelector('#op-pause').dataset.op === 'resume'`)
	if w := getApp(t, app, admin); !w.Control.Paused {
		tab.errorf("the API holds the App unpaused after Pause: %+v", w.Control)
	}
	pollJS[[]string](tab, "the paused event", time.Minute, eventsExpr(`e.includes('paused')`))
	tab.picture("console-workload-paused")

	tab.do("resume", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#op-pause[data-op="resume"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitNotVisible(chromedp.CSS("#confirm")),
	)
	pollJS[bool](tab, "Running again, with Pause offered", 2*time.Minute,
		`document.querySelector('#detail-phase').dataset.phase === 'Running' && document.querySelector('#op-pause').dataset.op === 'pause'`)
	readZones(tab, 5)

	// A refusal: restarting a stopped App answers 409, and the page shows
	// the API's error.
	tab.do("stop", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#op-stop[data-op="stop"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitNotVisible(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(`#op-stop[data-op="start"]`)),
	)
	refusal := apiRefusal(t, http.MethodPost, app+"/restart", admin, http.StatusConflict)
	tab.do("restart while stopped", 30*time.Second,
		chromedp.Click(chromedp.CSS("#op-restart")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitVisible(chromedp.CSS("#op-error")),
	)
	if shown := evalJS[string](tab, "read the refusal", `document.querySelector('#op-error').textContent`); !strings.Contains(shown, refusal) {
		tab.errorf("operation error %q, want the API's %q", shown, refusal)
	}
	tab.picture("console-refused")
	tab.do("start", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#op-stop[data-op="start"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitNotVisible(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(`#op-stop[data-op="stop"]`)),
		chromedp.WaitNotVisible(chromedp.CSS("#op-error")),
	)
	readZones(tab, 5)

	// Cancelling the dialog does nothing.
	tab.do("ask to delete, and cancel", 30*time.Second,
		chromedp.Click(chromedp.CSS("#op-delete")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-cancel")),
		chromedp.Click(chromedp.CSS("#confirm-cancel")),
		chromedp.WaitNotVisible(chromedp.CSS("#confirm")),
	)
	if status, body := consoleCall(t, http.MethodGet, app, admin, nil); status != http.StatusOK {
		tab.fatalf("after a cancelled delete the App answers %d: %s", status, body)
	}
	tab.picture("console-workload")

	// A viewer's pause: the API's 403 shows, and nothing changes.
	{
		vtab := b.newTab(t)
		refusal := apiRefusal(t, http.MethodPost, app+"/pause", viewer, http.StatusForbidden)
		vtab.do("sign in as a viewer on the App's page", 30*time.Second,
			chromedp.Navigate(reg.GatewayURL+"/console/"+detailHash),
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), viewer),
			chromedp.Click(chromedp.CSS("#signin")),
			chromedp.WaitVisible(chromedp.CSS(`#detail-phase[data-phase="Running"]`)),
			chromedp.Click(chromedp.CSS(`#op-pause[data-op="pause"]`)),
			chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
			chromedp.Click(chromedp.CSS("#confirm-ok")),
			chromedp.WaitVisible(chromedp.CSS("#op-error")),
		)
		if shown := evalJS[string](vtab, "read the refusal", `document.querySelector('#op-error').textContent`); !strings.Contains(shown, refusal) {
			vtab.errorf("operation error %q, want the API's %q", shown, refusal)
		}
		if op := evalJS[string](vtab, "read the pause button", `document.querySelector('#op-pause').dataset.op`); op != "pause" {
			vtab.errorf("after a refused pause the button offers %q, want pause", op)
		}
		// The region page shows anyone the SLI charts, and clusters only
		// to platform admins: no cluster, no error.
		vtab.do("open the region page as a viewer", 30*time.Second,
			chromedp.Click(chromedp.CSS("#nav-region")),
			chromedp.WaitVisible(chromedp.CSS("#region-note")),
		)
		pollJS[bool](vtab, "the SLI charts for a viewer", 30*time.Second, `document.querySelectorAll('#chart-launch svg circle.pt').length > 0`)
		if n := evalJS[int](vtab, "count clusters", `document.querySelectorAll('#region-zones .cluster').length`); n != 0 {
			vtab.errorf("a viewer's region page shows %d clusters, want none", n)
		}
		if errs := visibleErrors(vtab); errs != "" {
			vtab.errorf("errors on a viewer's region page: %s", errs)
		}
	}

	// The region page: every cluster under its zone, healthy and
	// uncordoned, with a bar per resource of each pool whose capacity is
	// the API's; the App's requests show in the CPU bars.
	status, body := consoleCall(t, http.MethodGet, "/v1/clusters", admin, nil)
	var clusters struct {
		Items []struct {
			Name, Zone        string
			Healthy, Cordoned bool
			Pools             map[string]struct {
				Allocatable struct{ MilliCPU, MemoryBytes, Pods int64 }
			}
		}
	}
	if err := json.Unmarshal(body, &clusters); status != http.StatusOK || err != nil || len(clusters.Items) == 0 {
		t.Fatalf("list the clusters: status %d (%v): %s", status, err, body)
	}
	want := map[string]clusterCard{}
	for _, c := range clusters.Items {
		card := clusterCard{Zone: c.Zone, Section: c.Zone, Healthy: c.Healthy, Cordoned: c.Cordoned, Pools: map[string]poolBars{}}
		for name, p := range c.Pools {
			card.Pools[name] = poolBars{CPU: p.Allocatable.MilliCPU, Memory: p.Allocatable.MemoryBytes, Pods: p.Allocatable.Pods}
		}
		want[c.Name] = card
	}
	tab.do("open the region page", 30*time.Second,
		chromedp.Click(chromedp.CSS("#nav-region")),
		chromedp.WaitVisible(chromedp.CSS("#region-view")),
	)
	cards := pollJS[map[string]clusterCard](tab, "every cluster on the region page", time.Minute, fmt.Sprintf(`(() => {
		const cards = [...document.querySelectorAll('#region-zones .cluster[data-cluster]')];
		if (cards.length !== %d) return null;
		const bar = (pool, r, f) => Number(pool.querySelector('.bar-row[data-resource="' + r + '"]')?.dataset[f] ?? -1);
		return Object.fromEntries(cards.map(c => [c.dataset.cluster, {
			zone: c.dataset.zone,
			section: c.closest('section[data-zone]').dataset.zone,
			healthy: c.dataset.healthy === 'true',
			cordoned: c.dataset.cordoned === 'true',
			cpuUsed: [...c.querySelectorAll('.pool')].reduce((n, p) => n + bar(p, 'cpu', 'used'), 0),
			pools: Object.fromEntries([...c.querySelectorAll('.pool[data-pool]')].map(p => [p.dataset.pool,
				{cpu: bar(p, 'cpu', 'capacity'), memory: bar(p, 'memory', 'capacity'), pods: bar(p, 'pods', 'capacity')}])),
		}]));
	})()`, len(want)))
	cpuUsed := int64(0)
	for name, c := range cards {
		cpuUsed += c.CPUUsed
		c.CPUUsed = 0
		cards[name] = c
	}
	if diff := cmp.Diff(want, cards); diff != "" {
		tab.errorf("clusters on the region page (-want +got):\n%s", diff)
	}
	if cpuUsed < 5*50 {
		tab.errorf("the CPU bars show %dm requested in all, want at least the App's 5 x 50m", cpuUsed)
	}

	// The SLI charts: points for the launches and requests of the last hour.
	type charts struct {
		Launch int `json:"launch"`
		Errors int `json:"errors"`
	}
	drawn := pollJS[charts](tab, "points in both SLI charts", 30*time.Second, `(() => {
		const n = (id) => document.querySelectorAll(id + ' svg circle.pt').length;
		const c = {launch: n('#chart-launch'), errors: n('#chart-errors')};
		return c.launch > 0 && c.errors > 0 ? c : null;
	})()`)
	t.Logf("SLI charts: %d launch latency points, %d error rate points", drawn.Launch, drawn.Errors)
	tab.picture("console-region")

	// Cordon and uncordon a cluster with its button.
	name := clusters.Items[0].Name
	t.Cleanup(func() { consoleCall(t, http.MethodPost, "/v1/clusters/"+name+"/uncordon", admin, nil) })
	button := chromedp.CSS(fmt.Sprintf(`#region-zones .cluster[data-cluster=%q] button.cordon`, name))
	tab.do("cordon "+name, 30*time.Second,
		chromedp.Click(button),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitNotVisible(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#region-zones .cluster[data-cluster=%q][data-cordoned="true"] .badge.cordoned`, name))),
	)
	if status, body := consoleCall(t, http.MethodGet, "/v1/clusters/"+name, admin, nil); status != http.StatusOK || !strings.Contains(string(body), `"cordoned":true`) {
		tab.errorf("after Cordon the API answers %d: %s", status, body)
	}
	tab.do("uncordon "+name, 30*time.Second,
		chromedp.Click(button),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitNotVisible(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#region-zones .cluster[data-cluster=%q][data-cordoned="false"] button.cordon[data-op="cordon"]`, name))),
	)

	// Delete from the App's page: back to the list, without it.
	tab.do("delete the App", 30*time.Second,
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = %q`, detailHash)),
		chromedp.WaitVisible(chromedp.CSS(`#detail-phase[data-phase="Running"]`)),
		chromedp.Click(chromedp.CSS("#op-delete")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitVisible(chromedp.CSS("#list-view")),
	)
	pollJS[bool](tab, "the App gone from the list", 30*time.Second, `!document.querySelector('#workloads tbody tr[data-workload="app/web"]')`)
	if status, body := consoleCall(t, http.MethodGet, app, admin, nil); status != http.StatusNotFound {
		tab.errorf("after Delete the App answers %d, want 404: %s", status, body)
	}
	if errs := visibleErrors(tab); errs != "" {
		tab.errorf("errors on the page at the end: %s", errs)
	}
}

// clusterCard is what the region page shows of a cluster.
type clusterCard struct {
	Zone     string              `json:"zone"`
	Section  string              `json:"section"` // the zone it is listed under
	Healthy  bool                `json:"healthy"`
	Cordoned bool                `json:"cordoned"`
	CPUUsed  int64               `json:"cpuUsed"`
	Pools    map[string]poolBars `json:"pools"`
}

// poolBars are the capacities of a pool's bars.
type poolBars struct {
	CPU    int64 `json:"cpu"`
	Memory int64 `json:"memory"`
	Pods   int64 `json:"pods"`
}

// balanced reports whether zones holds n zones whose ready replicas differ by one at most.
func balanced(zones map[string]zoneCounts, n int) bool {
	lo, hi := -1, -1
	for _, z := range zones {
		if lo < 0 || z.Ready < lo {
			lo = z.Ready
		}
		hi = max(hi, z.Ready)
	}
	return len(zones) == n && hi-lo <= 1
}

// appView is what the tests read of an App from the API.
type appView struct {
	Spec struct {
		Replicas int `json:"replicas"`
	} `json:"spec"`
	Control struct {
		Paused  bool `json:"paused"`
		Stopped bool `json:"stopped"`
	} `json:"control"`
}

// getApp reads an App through the API.
func getApp(t *testing.T, path, token string) appView {
	t.Helper()
	status, body := consoleCall(t, http.MethodGet, path, token, nil)
	var w appView
	if err := json.Unmarshal(body, &w); status != http.StatusOK || err != nil {
		t.Fatalf("get %s: status %d (%v): %s", path, status, err, body)
	}
	return w
}

// apiRefusal calls the API expecting a refusal with status want, and
// returns "code: message" of its error, as the console shows it.
func apiRefusal(t *testing.T, method, path, token string, want int) string {
	t.Helper()
	status, body := consoleCall(t, method, path, token, nil)
	var e struct{ Code, Message string }
	if err := json.Unmarshal(body, &e); status != want || err != nil || e.Message == "" {
		t.Fatalf("%s %s: status %d (%v), want %d with an error document: %s", method, path, status, err, want, body)
	}
	return e.Code + ": " + e.Message
}

// zoneCounts are the replicas the console shows for one zone.
type zoneCounts struct {
	Desired int `json:"desired"`
	Ready   int `json:"ready"`
}

// readZones waits until the App's page shows want replicas ready across
// its zones, and returns desired and ready per zone.
func readZones(tab *browserTab, want int) map[string]zoneCounts {
	tab.t.Helper()
	return pollJS[map[string]zoneCounts](tab, fmt.Sprintf("%d ready replicas per zone", want), 2*time.Minute, fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll('#zones tbody tr[data-zone]')];
		const field = (tr, f) => Number(tr.querySelector('[data-field="' + f + '"]').textContent);
		if (rows.reduce((n, tr) => n + field(tr, 'ready'), 0) !== %d) return null;
		if (rows.reduce((n, tr) => n + field(tr, 'desired'), 0) !== %d) return null;
		return Object.fromEntries(rows.map(tr => [tr.dataset.zone, {desired: field(tr, 'desired'), ready: field(tr, 'ready')}]));
	})()`, want, want))
}

// eventsExpr is an expression that returns the shown events (e) in order once cond holds.
func eventsExpr(cond string) string {
	return `(() => {
		const e = [...document.querySelectorAll('#events li')].map(li => li.dataset.event);
		return (` + cond + `) ? e : null;
	})()`
}

// visibleErrors returns the text of every error the page shows (not
// those left in a hidden view).
func visibleErrors(tab *browserTab) string {
	tab.t.Helper()
	return evalJS[string](tab, "read the errors", `[...document.querySelectorAll('.error')]
		.filter(e => e.checkVisibility()).map(e => '#' + e.id + ': ' + e.textContent).join('; ')`)
}

// checkLogTail waits for a line in the open App's live log tail, with no
// error in the log panel. On failure it tells what the API answers to a
// plain request for the same logs (path).
func checkLogTail(tab *browserTab, path, token string) {
	t := tab.t
	t.Helper()
	type panel struct {
		Lines  int    `json:"lines"`
		Error  string `json:"error"`
		Status string `json:"status"`
	}
	const read = `({
		lines: document.querySelectorAll('#logs .log-line').length,
		error: document.querySelector('#logs-error').hidden ? '' : document.querySelector('#logs-error').textContent,
		status: document.querySelector('#logs-status').textContent,
	})`
	ctx, cancel := context.WithTimeout(tab.ctx, 70*time.Second)
	defer cancel()
	got, err := chromedp.Run(ctx, chromedp.Poll[panel](`(() => { const p = `+read+`; return p.lines > 0 && !p.error ? p : null })()`,
		chromedp.WithPollingTimeout(time.Minute), chromedp.WithPollingInterval(250*time.Millisecond)))
	if err == nil {
		t.Logf("log tail: %d lines, %s", got.Lines, got.Status)
		return
	}
	now := evalJS[panel](tab, "read the log panel", read)
	status, body := consoleCall(t, http.MethodGet, path, token, nil)
	tab.fatalf("no log line without an error in the live tail after a minute (%v): panel %+v; the API answers %d: %.300s", err, now, status, body)
}

// consoleCall calls the gateway's API with a bearer token.
func consoleCall(t *testing.T, method, path, token string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, reg.GatewayURL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return res.StatusCode, b
}

// chromium is one headless Chromium for a test; each subtest gets a tab.
type chromium struct {
	b *browsertest.Browser
}

// startChromium starts Chromium with a fresh profile. It lives until the
// test ends, at most 8 minutes.
func startChromium(t *testing.T) *chromium {
	t.Helper()
	return &chromium{b: browsertest.Start(t, browsertest.Options{Timeout: 8 * time.Minute})}
}

// browserTab is one tab (failing the test on the page's exceptions, with
// its console and a screenshot on failure) and the test that drives it.
type browserTab struct {
	*browsertest.Tab
	t   *testing.T
	ctx context.Context
}

// newTab opens a tab (a fresh sessionStorage).
func (b *chromium) newTab(t *testing.T) *browserTab {
	t.Helper()
	tab := b.b.NewTab(t)
	return &browserTab{Tab: tab, t: t, ctx: tab.Ctx}
}

// picture saves the page as name.png in the test's artifact directory
// (kept with `go test -artifacts -outputdir DIR`) and logs its path, to be
// looked at.
func (tab *browserTab) picture(name string) {
	t := tab.t
	t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("no screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Logf("no screenshot %s: %v", name, err)
		return
	}
	t.Logf("screenshot %s: %s", name, path)
}

// errorf fails the test, and saves a screenshot of the page as it is.
func (tab *browserTab) errorf(format string, args ...any) {
	tab.t.Helper()
	tab.t.Errorf(format, args...)
	tab.Screenshot("of the failure")
}

// fatalf fails the test and stops it, after a screenshot of the page.
func (tab *browserTab) fatalf(format string, args ...any) {
	tab.t.Helper()
	tab.errorf(format, args...)
	tab.t.FailNow()
}

// do runs the steps within d, failing the test with what on error.
func (tab *browserTab) do(what string, d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tab.fatalf("%s: %v", what, err)
	}
}

// evalJS evaluates a JavaScript expression in the page.
func evalJS[T any](tab *browserTab, what, expr string) T {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, 15*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tab.fatalf("%s: %v", what, err)
	}
	return v
}

// pollJS waits up to d for a JavaScript expression to be truthy and returns its value.
func pollJS[T any](tab *browserTab, what string, d time.Duration, expr string) T {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, d+10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Poll[T](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(250*time.Millisecond)))
	if err != nil {
		tab.fatalf("wait for %s (%v): %v", what, d, err)
	}
	return v
}
