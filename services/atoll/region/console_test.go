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
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
)

// chromiumPath is Debian's Chromium, which `make browser` (and so `make
// test`) installs.
const chromiumPath = "/usr/bin/chromium"

// TestConsole drives the web console the gateway serves in a real headless
// Chromium: sign in, watch an App come up, read it, and fail to sign in.
func TestConsole(t *testing.T) {
	needRegion(t)
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("the console test needs Debian's Chromium at %s (`make browser` installs it): %v", chromiumPath, err)
	}
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

// visibleErrors returns the text of every error the page shows.
func visibleErrors(tab *browserTab) string {
	tab.t.Helper()
	return evalJS[string](tab, "read the errors", `[...document.querySelectorAll('.error')]
		.filter(e => !e.hidden).map(e => '#' + e.id + ': ' + e.textContent).join('; ')`)
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
	ctx context.Context
}

// startChromium starts Chromium with a fresh profile. It lives until the
// test ends, at most 8 minutes.
func startChromium(t *testing.T) *chromium {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromiumPath),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// Without these Chromium keeps calling home, which this machine's
		// closed network answers slowly or not at all.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.WindowSize(1280, 900),
	)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	// The first run starts the browser; its context must outlive the test's
	// steps, so the bound is ctx's.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	return &chromium{ctx: bctx}
}

// browserTab is one tab and the test that drives it.
type browserTab struct {
	t   *testing.T
	ctx context.Context

	shots int // screenshots taken

	mu      sync.Mutex
	console []chromedp.ConsoleMessage // mu must be held
}

// newTab opens a tab (a fresh sessionStorage). When the test ends it fails
// on any uncaught exception of the page, and on failure it logs the page's
// console and saves a screenshot.
func (b *chromium) newTab(t *testing.T) *browserTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	tab := &browserTab{t: t, ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			tab.mu.Lock()
			tab.console = append(tab.console, m)
			tab.mu.Unlock()
		}
	}()
	t.Cleanup(tab.finish)
	return tab
}

func (tab *browserTab) finish() {
	t := tab.t
	tab.mu.Lock()
	console := tab.console
	tab.mu.Unlock()
	for _, m := range console {
		if m.Type == chromedp.ConsoleException {
			t.Errorf("the page threw: %s (%s:%d)", m.Text, m.URL, m.Line+1)
		}
	}
	if !t.Failed() {
		return
	}
	for _, m := range console {
		t.Logf("browser console %s: %s", m.Type, m.Text)
	}
	tab.screenshot("at the end")
}

// screenshot saves the page into the test's artifact directory (a
// temporary directory like t.TempDir(), kept with `go test -artifacts`)
// and logs its path.
func (tab *browserTab) screenshot(when string) {
	t := tab.t
	t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("no screenshot %s: %v", when, err)
		return
	}
	tab.shots++
	path := filepath.Join(t.ArtifactDir(), fmt.Sprintf("console-%d.png", tab.shots))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Logf("no screenshot %s: %v", when, err)
		return
	}
	t.Logf("screenshot %s: %s", when, path)
}

// errorf fails the test, and saves a screenshot of the page as it is.
func (tab *browserTab) errorf(format string, args ...any) {
	tab.t.Helper()
	tab.t.Errorf(format, args...)
	tab.screenshot("of the failure")
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
