package region_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atoll.dev/libs/api"
	"atoll.dev/libs/browsertest"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/atoll/e2e"
)

// TestConsoleFileLogs follows a file inside an App's containers, across
// its pods, through the API and in the console: a line appended to the
// file shows within 2 s; a missing file, a path the platform does not
// allow and a viewer are refused with a 4xx the page shows. (The member
// clusters are KWOK's: a container's files are this machine's.)
func TestConsoleFileLogs(t *testing.T) {
	e2e.Need(t)
	project := fmt.Sprintf("files-%d", time.Now().UnixNano()%1_000_000)
	dev := reg.Token("dev@"+project, false, map[string]string{project: "developer"})
	viewer := reg.Token("viewer@"+project, false, map[string]string{project: "viewer"})
	base := "/v1/projects/" + project + "/workloads"
	if status, body := consoleCall(t, http.MethodPost, base, dev, gwApp("files", 2, nil)); status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	t.Cleanup(func() { consoleCall(t, http.MethodDelete, base+"/app/files", dev, nil) })
	waitPhase(t, dev, base+"/app/files", api.PhaseRunning)
	logFile := filepath.Join(t.TempDir(), "app.log")
	appendTo := func(line string) {
		t.Helper()
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := fmt.Fprintln(f, line); err != nil {
			t.Fatal(err)
		}
	}
	appendTo("first line " + project)

	// The API: the file's lines from each pod; the refusals.
	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(dev))
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Logs(ctx, project, "app", "files", computeapi.StreamLogsParams{File: logFile}, func(l computeapi.LogLine) error {
		if l.Line == "first line "+project && l.Container == "web" && !l.Time.IsZero() {
			pods[l.Pod] = true
		}
		return nil
	})
	if err != nil || len(pods) != 2 {
		t.Fatalf("file log: the line from pods %v, want 2 (err %v)", pods, err)
	}
	refusals := []struct {
		name, token, file string
		is                func(error) bool
	}{
		{"missing file", dev, filepath.Join(filepath.Dir(logFile), "missing.log"), sdk.IsNotFound},
		{"outside what the platform allows", dev, "/proc/self/environ", func(err error) bool { return strings.Contains(fmt.Sprint(err), "400") }},
		{"not a clean path", dev, filepath.Dir(logFile) + "/../x.log", func(err error) bool { return strings.Contains(fmt.Sprint(err), "400") }},
		{"viewer", viewer, logFile, sdk.IsForbidden},
	}
	for _, r := range refusals {
		rc, _ := sdk.New(reg.GatewayURL, sdk.WithToken(r.token))
		err := rc.Logs(ctx, project, "app", "files", computeapi.StreamLogsParams{File: r.file}, func(computeapi.LogLine) error { return nil })
		if !r.is(err) {
			t.Errorf("%s: %v", r.name, err)
		}
	}

	browsertest.Skip(t)
	b := startChromium(t)
	tab := b.newTab(t)
	tab.do("follow the file in the console", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/#/p/"+project+"/App/files"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), dev),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#logs-file")),
		chromedp.SendKeys(chromedp.CSS("#logs-file"), logFile),
		chromedp.Click(chromedp.CSS("#logs-file-follow")),
	)
	linesOf := func(text string) string {
		return fmt.Sprintf(`new Set([...document.querySelectorAll('#logs .log-line')].filter((l) => l.querySelector('.text').textContent === %q).map((l) => l.dataset.pod)).size`, text)
	}
	if n := pollJS[int](tab, "the file's line from both pods", 30*time.Second, linesOf("first line "+project)+` >= 2 && 2`); n != 2 {
		tab.fatalf("first line from %d pods, want 2", n)
	}
	if st := evalJS[string](tab, "read the stream status", `document.querySelector('#logs-status').textContent`); st != "streaming" {
		tab.errorf("logs status %q, want streaming", st)
	}
	late := "appended " + project
	appendTo(late)
	start := time.Now()
	pollJS[int](tab, "the appended line within 2 s", 2*time.Second, linesOf(late)+` >= 1 && 1`)
	t.Logf("an appended line showed in %v", time.Since(start).Round(10*time.Millisecond))

	tab.do("follow a missing file", 30*time.Second,
		chromedp.Clear(chromedp.CSS("#logs-file")),
		chromedp.SendKeys(chromedp.CSS("#logs-file"), filepath.Join(filepath.Dir(logFile), "missing.log")),
		chromedp.Click(chromedp.CSS("#logs-file-follow")),
		chromedp.WaitVisible(chromedp.CSS("#logs-error")),
	)
	msg := evalJS[string](tab, "read the error", `document.querySelector('#logs-error').textContent`)
	for _, want := range []string{"NotFound", "no file", "missing.log"} {
		if !strings.Contains(msg, want) {
			tab.errorf("missing file error %q lacks %q", msg, want)
		}
	}
}
