package region_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"atoll.dev/libs/api"
	"atoll.dev/libs/browsertest"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
)

// TestConsoleShell opens a shell in the browser on an App's pod: what is
// typed runs there, its output and exit code are shown, the session is
// audited as the CLI's are; the platform's sidecar is never offered (and
// the API refuses it), and a viewer sees the API's refusal.
func TestConsoleShell(t *testing.T) {
	e2e.Need(t)
	browsertest.Skip(t)
	project := fmt.Sprintf("shell-%d", time.Now().UnixNano()%1_000_000)
	dev := reg.Token("dev@"+project, false, map[string]string{project: "developer"})
	viewer := reg.Token("viewer@"+project, false, map[string]string{project: "viewer"})
	base := "/v1/projects/" + project + "/workloads"
	if status, body := consoleCall(t, http.MethodPost, base, dev, gwApp("sh", 1, nil)); status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	t.Cleanup(func() { consoleCall(t, http.MethodDelete, base+"/app/sh", dev, nil) })
	if status, _ := consoleCall(t, http.MethodGet, "/console/vendor/xterm.mjs", "", nil); status != http.StatusOK {
		t.Fatalf("the console's terminal (xterm.js) is not built in: %d; run `make console-assets` first (make test does)", status)
	}
	waitPhase(t, dev, base+"/app/sh", api.PhaseRunning)
	// The pods are found through their logs: make sure there is a line.
	if err := testenv.AppendLog(reg.PodLogFile, "shell test "+project); err != nil {
		t.Fatal(err)
	}

	// The API refuses the platform's sidecar, whatever the role.
	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(dev))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(context.Background(), project, "app", "sh", computeapi.ExecShellParams{Command: []string{"true"}, Container: "atoll-log-shipper"}, nil, nil, nil, nil); !sdk.IsForbidden(err) {
		t.Fatalf("exec into the platform's sidecar: %v, want 403", err)
	}

	audit, err := reg.Bus.NC.SubscribeSync("atoll.audit." + project + ".exec")
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Unsubscribe()

	b := startChromium(t)
	signIn := func(tab *browserTab, token string) {
		tab.do("open the App and its shell panel", time.Minute,
			chromedp.Navigate(reg.GatewayURL+"/console/#/p/"+project+"/App/sh"),
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), token),
			chromedp.Click(chromedp.CSS("#signin")),
			chromedp.WaitVisible(chromedp.CSS("#shell-card")),
			chromedp.WaitReady(chromedp.CSS(`#shell-container option[value="web"]`)),
		)
	}

	t.Run("DeveloperRunsACommand", func(t *testing.T) {
		tab := b.newTab(t)
		signIn(tab, dev)
		offered := evalJS[[]string](tab, "read the containers offered", `[...document.querySelectorAll('#shell-container option')].map((o) => o.value)`)
		if strings.Join(offered, ",") != "web" {
			tab.errorf("containers offered %q, want only the App's own web (never the platform's sidecar)", offered)
		}
		// A pod is offered by name, found through the logs.
		pod := pollJS[string](tab, "a pod to choose", 30*time.Second, `document.querySelector('#shell-pod option[value]:not([value=""])')?.value || ''`)
		evalJS[bool](tab, "choose the pod", fmt.Sprintf(`(document.querySelector('#shell-pod').value = %q, true)`, pod))
		tab.do("open the shell", time.Minute,
			chromedp.Click(chromedp.CSS("#shell-open")),
			chromedp.WaitReady(chromedp.CSS(`#shell-card[data-state="open"]`)),
			chromedp.WaitReady(chromedp.CSS(`#shell-term .xterm-helper-textarea`)),
		)
		if st := evalJS[string](tab, "read the status", `document.querySelector('#shell-status').textContent`); !strings.Contains(st, pod+"/web") {
			tab.errorf("status %q does not name %s/web", st, pod)
		}
		// Typed as text input, then Enter: chromedp's SendKeys sends each
		// printable key both as a key press and as a character, which a
		// terminal (rightly) takes as two.
		typeLine := func(line string) chromedp.Action[chromedp.Void] {
			return chromedp.Steps(
				chromedp.Focus(chromedp.CSS("#shell-term .xterm-helper-textarea")),
				chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
					_, err := chromedp.Call(ctx, input.InsertText, input.InsertTextParams{Text: line})
					return err
				}),
				chromedp.KeyEvent(kb.Enter))
		}
		const readRows = `[...document.querySelectorAll('#shell-term .xterm-rows > div')].map((r) => r.textContent.trim())`
		// `echo hello` and `exit 3` as two lines: KWOK v0.8's simulated
		// kubelet closes a terminal's pty as soon as its command exits,
		// without draining it, so the output of `echo hello; exit 3` on one
		// line is sometimes lost there (a kubelet drains it).
		// The shell's prompt first, so that the terminal's echo of the line
		// does not come before it.
		pollJS[bool](tab, "the shell's prompt", 20*time.Second, readRows+`.some((r) => /[#$>]$/.test(r))`)
		tab.do("type echo hello", 30*time.Second, typeLine("echo hello"))
		ctx, cancel := context.WithTimeout(tab.ctx, 20*time.Second)
		// The output, not the echo of the command line.
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](readRows+`.some((r) => r.endsWith('hello') && !r.includes('echo'))`, chromedp.WithPollingTimeout(10*time.Second)))
		cancel()
		if err != nil {
			tab.fatalf("no line reading hello in the terminal: %q", evalJS[[]string](tab, "read the terminal", readRows))
		}
		tab.do("type exit 3", 30*time.Second, typeLine("exit 3"))
		ctx, cancel = context.WithTimeout(tab.ctx, 30*time.Second)
		_, err = chromedp.Run(ctx, chromedp.Poll[bool](`!!document.querySelector('#shell-end[data-exit-code]')`, chromedp.WithPollingTimeout(20*time.Second)))
		cancel()
		if err != nil {
			tab.fatalf("the session did not end (%v): terminal %q, status %q", err, evalJS[[]string](tab, "read the terminal", readRows),
				evalJS[string](tab, "read the status", `document.querySelector('#shell-status').textContent + ' | ' + document.querySelector('#shell-end').textContent + ' | ' + document.querySelector('#shell-error').textContent`))
		}
		if end := evalJS[string](tab, "read the end", `document.querySelector('#shell-end').textContent`); !strings.Contains(end, "exit code 3") {
			tab.errorf("end of session %q does not say exit code 3", end)
		}

		// The session is on the audit trail as a CLI's is: who, what, where.
		var rec struct{ Subject, Verb, Outcome, Detail string }
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && rec.Subject != "dev@"+project {
			m, err := audit.NextMsg(time.Second)
			if err != nil {
				continue
			}
			_ = json.Unmarshal(m.Data, &rec)
		}
		if rec.Subject != "dev@"+project || rec.Verb != "exec" || rec.Outcome != "started" ||
			!strings.Contains(rec.Detail, `container="web"`) || !strings.Contains(rec.Detail, fmt.Sprintf("pod=%q", pod)) {
			t.Errorf("audit record of the session: %+v", rec)
		}
	})

	t.Run("ViewerIsRefused", func(t *testing.T) {
		tab := b.newTab(t)
		signIn(tab, viewer)
		tab.do("try to open a shell", time.Minute,
			chromedp.Click(chromedp.CSS("#shell-open")),
			chromedp.WaitVisible(chromedp.CSS("#shell-error")),
		)
		msg := evalJS[string](tab, "read the refusal", `document.querySelector('#shell-error').textContent`)
		for _, want := range []string{"refused", "Forbidden"} {
			if !strings.Contains(msg, want) {
				tab.errorf("refusal %q lacks %q", msg, want)
			}
		}
		if st := evalJS[string](tab, "read the state", `document.querySelector('#shell-card').dataset.state`); st != "ended" {
			tab.errorf("shell state %q after a refusal, want ended", st)
		}
	})
}
