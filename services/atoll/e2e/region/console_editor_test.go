package region_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"

	"atoll.dev/libs/api"
	"atoll.dev/libs/browsertest"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/atoll/e2e"
)

// TestConsoleEditor creates an App from the console's editor: an invalid
// field is marked at its line and nothing is created; fixed, the diff is
// shown and applied, and the App runs; its image edited, the diff shows
// the one line and the rollout to the new image starts.
func TestConsoleEditor(t *testing.T) {
	e2e.Need(t)
	browsertest.Skip(t)
	if status, _ := consoleCall(t, http.MethodGet, "/console/vendor/editor.mjs", "", nil); status != http.StatusOK {
		t.Fatalf("the console's editor (CodeMirror) is not built in: %d; run `make console-assets` first (make test does)", status)
	}
	project := fmt.Sprintf("editor-%d", time.Now().UnixNano()%1_000_000)
	dev := reg.Token("dev@"+project, false, map[string]string{project: "developer"})
	path := "/v1/projects/" + project + "/workloads/App/edited"
	t.Cleanup(func() { consoleCall(t, http.MethodDelete, path, dev, nil) })
	doc := func(cpu, image string) string {
		return fmt.Sprintf(`apiVersion: atoll.dev/v1
kind: App
metadata:
  project: %s
  name: edited
spec:
  replicas: 1
  template:
    containers:
      - name: web
        image: %s
        resources:
          requests:
            cpu: %s
            memory: 32Mi
`, project, image, cpu)
	}
	const cpuLine = 14 // the line of "cpu:" in doc
	b := startChromium(t)
	tab := b.newTab(t)
	tab.do("open the editor with an example", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/#/p/"+project+"/new"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), dev),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#editor .cm-content")),
	)
	pollJS[bool](tab, "the App example loaded", 20*time.Second, `document.querySelector('#editor').editorView.state.doc.toString().includes('kind: App')`)
	setText := func(text string) {
		evalJS[bool](tab, "set the editor's text", fmt.Sprintf(`(() => { const v = document.querySelector('#editor').editorView;
			v.dispatch({ changes: { from: 0, to: v.state.doc.length, insert: %q } }); return true; })()`, text))
	}

	// One invalid field: marked at its line, nothing created.
	setText(doc("lots", "nginx:1.27"))
	tab.do("review and apply the invalid document", time.Minute,
		chromedp.Click(chromedp.CSS("#editor-review")),
		chromedp.WaitVisible(chromedp.CSS("#editor-apply")),
		chromedp.Click(chromedp.CSS("#editor-apply")),
		chromedp.WaitVisible(chromedp.CSS("#editor-fields li")),
	)
	type fieldError struct {
		Line  string `json:"line"`
		Field string `json:"field"`
		Text  string `json:"text"`
	}
	errs := evalJS[[]fieldError](tab, "read the field errors", `[...document.querySelectorAll('#editor-fields li')].map((li) => ({line: li.dataset.line, field: li.dataset.field, text: li.textContent}))`)
	if len(errs) != 1 || errs[0].Line != fmt.Sprint(cpuLine) || !strings.HasSuffix(errs[0].Field, "requests.cpu") {
		tab.errorf("field errors %+v, want one on requests.cpu at line %d", errs, cpuLine)
	}
	// The mark is in the editor, on that line's text.
	if marked := evalJS[string](tab, "read the marked text", `[...document.querySelectorAll('#editor .cm-lintRange-error')].map((e) => e.textContent).join('|')`); !strings.Contains(marked, "cpu: lots") {
		tab.errorf("marked in the editor: %q, want the cpu line", marked)
	}
	if status, body := consoleCall(t, http.MethodGet, path, dev, nil); status != http.StatusNotFound {
		t.Fatalf("after a refused document the App exists: %d %s", status, body)
	}

	// Fixed: the diff (every line new), applied, and the App runs.
	setText(doc("50m", "nginx:1.27"))
	tab.do("review the fixed document", time.Minute,
		chromedp.Click(chromedp.CSS("#editor-review")),
		chromedp.WaitVisible(chromedp.CSS("#editor-apply")),
	)
	added := evalJS[[]string](tab, "read the diff", `[...document.querySelectorAll('#editor-diff span[data-op="+"]')].map((s) => s.textContent)`)
	if !slices.ContainsFunc(added, func(s string) bool { return strings.Contains(s, "cpu: 50m") }) {
		tab.errorf("the diff of a new App %q lacks the cpu line", added)
	}
	tab.do("apply", time.Minute,
		chromedp.Click(chromedp.CSS("#editor-apply")),
		chromedp.WaitVisible(chromedp.CSS("#detail-view")),
	)
	waitPhase(t, dev, path, api.PhaseRunning)

	// Edited: the diff is the image line, and the rollout to it starts.
	tab.do("open the App's editor", time.Minute,
		chromedp.Click(chromedp.CSS("#op-edit")),
		chromedp.WaitVisible(chromedp.CSS("#editor .cm-content")),
	)
	stored := pollJS[string](tab, "the stored document", 20*time.Second, `(() => { const t = document.querySelector('#editor').editorView.state.doc.toString(); return t.includes('name: edited') && t; })()`)
	setText(strings.Replace(stored, "nginx:1.27", "nginx:1.28", 1))
	tab.do("review the edit", time.Minute,
		chromedp.Click(chromedp.CSS("#editor-review")),
		chromedp.WaitVisible(chromedp.CSS("#editor-apply")),
	)
	changed := evalJS[[]string](tab, "read the diff", `[...document.querySelectorAll('#editor-diff span:not([data-op=" "])')].map((s) => s.textContent.replace(/\s+/g, ' ').trim())`)
	if want := []string{"- image: nginx:1.27", "+ image: nginx:1.28"}; !slices.Equal(changed, want) {
		tab.errorf("the edit's diff %q, want %q", changed, want)
	}
	tab.do("apply the edit", time.Minute,
		chromedp.Click(chromedp.CSS("#editor-apply")),
		chromedp.WaitVisible(chromedp.CSS("#detail-view")),
	)
	waitWorkload(t, dev, path, func(ct *assert.CollectT, w computeapi.Workload) {
		assert.Equal(ct, int64(2), w.Metadata.Generation, "generation")
		assert.Contains(ct, w.Status.Images, "nginx:1.28", "images running")
	})
	var rollout struct{ Phase, Stable, Target string }
	status, body := consoleCall(t, http.MethodGet, "/v1/projects/"+project+"/apps/edited/rollout", dev, nil)
	if status != http.StatusOK || json.Unmarshal(body, &rollout) != nil || rollout.Target == "" || rollout.Phase == "" {
		t.Errorf("no rollout of the edit: %d %s", status, body)
	}
	t.Logf("the edit's rollout: %s", body)
}
