// Package browsertest drives the console in a headless Chromium for tests:
// one browser per test with a fresh profile, tabs that fail the test on
// any exception the page throws, and, when the test fails, the page's
// console in the log and a screenshot among the test's artifacts (kept
// with `go test -artifacts`).
//
// The browser is Debian's Chromium, which `make browser` (and so `make
// test`) installs; Skip skips a test on a machine without it.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Path is where Debian's Chromium is.
const Path = "/usr/bin/chromium"

// Available says why there is no browser to drive (nil: there is).
func Available() error {
	if _, err := os.Stat(Path); err != nil {
		return fmt.Errorf("no Chromium at %s (`make browser` installs it): %w", Path, err)
	}
	return nil
}

// Skip skips t when there is no browser.
func Skip(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("the console test needs Debian's Chromium: %v", err)
	}
}

// Browser is one headless Chromium; it lives until its test ends.
type Browser struct {
	ctx context.Context
}

// Options size a browser's window and bound its life.
type Options struct {
	// Width and Height of the window (default 1280×900).
	Width, Height int
	// Timeout bounds the browser's whole life (default 4 minutes).
	Timeout time.Duration
}

// Start starts Chromium with a fresh profile for t.
func Start(t testing.TB, o Options) *Browser {
	t.Helper()
	if o.Width == 0 {
		o.Width, o.Height = 1280, 900
	}
	if o.Timeout == 0 {
		o.Timeout = 4 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(Path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		// Without these Chromium keeps calling home, which a closed
		// network answers slowly or not at all.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.WindowSize(o.Width, o.Height),
	)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	// The first run starts the browser; its context must outlive the
	// test's steps, so the bound is ctx's.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", Path, err)
	}
	return &Browser{ctx: bctx}
}

// Tab is one tab and the test that drives it.
type Tab struct {
	// Ctx runs chromedp actions in the tab.
	Ctx context.Context
	t   testing.TB

	shots int // screenshots taken

	mu      sync.Mutex
	console []chromedp.ConsoleMessage // mu must be held
}

// Open starts a browser with o and opens its one tab: the shortest way
// for a test that drives one page.
func Open(t testing.TB, o Options) *Tab {
	t.Helper()
	return Start(t, o).NewTab(t)
}

// NewTab opens a tab (a fresh sessionStorage). When t ends it fails on any
// uncaught exception of the page, and on failure it logs the page's
// console and saves a screenshot.
func (b *Browser) NewTab(t testing.TB) *Tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	tab := &Tab{t: t, Ctx: ctx}
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

func (tab *Tab) finish() {
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
	tab.Screenshot("at the end")
}

// Screenshot saves the page into the test's artifact directory (a
// temporary directory like t.TempDir(), kept with `go test -artifacts`)
// and logs its path.
func (tab *Tab) Screenshot(when string) {
	t := tab.t
	t.Helper()
	ctx, cancel := context.WithTimeout(tab.Ctx, 15*time.Second)
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

// Do runs steps in the tab within d, failing the test with what on error.
func (tab *Tab) Do(what string, d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.Ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tab.t.Fatalf("%s: %v", what, err)
	}
}

// WaitTrue polls the JavaScript expression expr every 250 ms until it is
// true, for at most 30 s; otherwise it fails the test with what and the
// page's text.
func (tab *Tab) WaitTrue(what, expr string) {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.Ctx, 40*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(250*time.Millisecond)))
	if err != nil {
		text, _ := chromedp.Run(tab.Ctx, chromedp.Evaluate[string](`document.querySelector('main').innerText`))
		tab.t.Fatalf("console: %s: %v\npage:\n%.2000s", what, err, text)
	}
}
