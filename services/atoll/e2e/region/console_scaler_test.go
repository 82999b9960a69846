package region_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atoll.dev/libs/browsertest"
	"atoll.dev/services/atoll/e2e"
)

// TestConsoleScalerHistory: a Scaler's page in the console draws its
// decisions (the replicas chosen over time) and lists them with their
// outcome and reason, after a custom metric pushed through the API has
// scaled its App.
func TestConsoleScalerHistory(t *testing.T) {
	e2e.Need(t)
	browsertest.Skip(t)
	project := fmt.Sprintf("scaler-%d", time.Now().UnixNano()%1_000_000)
	token := reg.Token("dev-"+project, false, map[string]string{project: "developer"})
	path := "/v1/projects/" + project + "/workloads"
	for _, doc := range []string{
		fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":"web"},
"spec":{"replicas":1,"template":{"containers":[{"name":"web","image":"nginx","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`, project),
		fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"Scaler","metadata":{"project":%q,"name":"web"},
"spec":{"target":"web","minReplicas":1,"maxReplicas":5,"metrics":[{"type":"custom","name":"qps","targetPerPod":100}]}}`, project),
	} {
		if status, body := consoleCall(t, http.MethodPost, path, token, []byte(doc)); status != http.StatusCreated {
			t.Fatalf("create: %d %s", status, body)
		}
	}
	t.Cleanup(func() {
		consoleCall(t, http.MethodDelete, path+"/Scaler/web", token, nil)
		consoleCall(t, http.MethodDelete, path+"/App/web", token, nil)
	})
	deadline := time.Now().Add(time.Minute)
	for {
		status, body := consoleCall(t, http.MethodPost, "/v1/projects/"+project+"/apps/web/metrics/qps", token, []byte(`{"value":300}`))
		if status != http.StatusAccepted {
			t.Fatalf("push: %d %s", status, body)
		}
		_, w := consoleCall(t, http.MethodGet, path+"/App/web", token, nil)
		if strings.Contains(string(w), `"replicas":3`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the App did not scale to 3: %s", w)
		}
		time.Sleep(time.Second) // pacing the pushes is the subject: a client pushing its load
	}

	b := startChromium(t)
	tab := b.newTab(t)
	tab.do("open the Scaler's page", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/#/p/"+project+"/Scaler/web"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#scaler-card")),
		chromedp.WaitVisible(chromedp.CSS(`#chart-scaler svg circle[data-replicas="3"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#decisions tr[data-outcome="scaled"]`)),
	)
	row := evalJS[string](tab, "read the scaled decision", `document.querySelector('#decisions tr[data-outcome="scaled"]').textContent`)
	for _, want := range []string{"1 → 3", "qps 300/100 → 3", "metric qps"} {
		if !strings.Contains(row, want) {
			tab.errorf("decision row %q lacks %q", row, want)
		}
	}
}
