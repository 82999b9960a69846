package region_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atoll.dev/libs/api"
	"atoll.dev/libs/browsertest"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/atoll/e2e"
)

// TestConsoleOperatorsEdit: a platform admin changes a cluster's burst
// buffer label and a project's OnDemand CPU quota from the console, each
// after a confirmation that shows the change; the API shows both and the
// audit stream holds both.
func TestConsoleOperatorsEdit(t *testing.T) {
	e2e.Need(t)
	browsertest.Skip(t)
	project := fmt.Sprintf("quota-%d", time.Now().UnixNano()%1_000_000)
	subject := "root@" + project
	admin := reg.Token(subject, true, nil)

	status, body := consoleCall(t, http.MethodGet, "/v1/clusters", admin, nil)
	var clusters computeapi.ClusterList
	if status != http.StatusOK || json.Unmarshal(body, &clusters) != nil || len(clusters.Items) == 0 {
		t.Fatalf("clusters: %d %s", status, body)
	}
	cluster := clusters.Items[0].Name
	old, had := clusters.Items[0].Labels[api.LabelBufferPercent]
	want := "17"
	if old == want {
		want = "18"
	}
	t.Cleanup(func() { // the region is shared: the buffer as it was
		patch := fmt.Sprintf(`{"remove":[%q]}`, api.LabelBufferPercent)
		if had {
			patch = fmt.Sprintf(`{"set":{%q:%q}}`, api.LabelBufferPercent, old)
		}
		consoleCall(t, http.MethodPatch, "/v1/clusters/"+cluster+"/labels", admin, []byte(patch))
	})
	audit, err := reg.Bus.NC.SubscribeSync("atoll.audit.>")
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Unsubscribe()

	b := startChromium(t)
	tab := b.newTab(t)
	card := fmt.Sprintf(`#region-zones .cluster[data-cluster=%q]`, cluster)
	tab.do("open the cluster's labels form", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/#/region"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), admin),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS(card+" button.labels-edit")),
		chromedp.Click(chromedp.CSS(card+" button.labels-edit")),
		chromedp.WaitVisible(chromedp.CSS(card+" .labels-form .buffer")),
		chromedp.Clear(chromedp.CSS(card+" .labels-form .buffer")),
		chromedp.SendKeys(chromedp.CSS(card+" .labels-form .buffer"), want),
		chromedp.Click(chromedp.CSS(card+" .labels-save")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	)
	confirm := evalJS[string](tab, "read the confirmation", `document.querySelector('#confirm-text').textContent`)
	if !strings.Contains(confirm, api.LabelBufferPercent) || !strings.Contains(confirm, want) {
		tab.errorf("the confirmation %q does not show the buffer change to %s", confirm, want)
	}
	tab.do("confirm the labels", 30*time.Second,
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitNotVisible(chromedp.CSS(card+" .labels-form")),
	)
	pollJS[bool](tab, "the card showing the new buffer", 10*time.Second,
		fmt.Sprintf(`document.querySelector(%q).textContent.includes(%q)`, card+" .cluster-labels", api.LabelBufferPercent+"="+want))
	status, body = consoleCall(t, http.MethodGet, "/v1/clusters/"+cluster, admin, nil)
	var c computeapi.Cluster
	if status != http.StatusOK || json.Unmarshal(body, &c) != nil || c.Labels[api.LabelBufferPercent] != want {
		t.Errorf("the API's cluster after the change: %d %s", status, body)
	}

	tab.do("change the OnDemand CPU quota", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/#/p/"+project),
		chromedp.WaitVisible(chromedp.CSS("#quota-form")),
		chromedp.SetValue(chromedp.CSS("#quota-tier"), "OnDemand"),
		// The field holds the default cap; emptied by value (Clear leaves a
		// number input as it is), then typed, so the form knows it was edited.
		chromedp.SetValue(chromedp.CSS("#quota-cpu"), ""),
		chromedp.SendKeys(chromedp.CSS("#quota-cpu"), "12000"),
		chromedp.Click(chromedp.CSS("#quota-save")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	)
	confirm = evalJS[string](tab, "read the confirmation", `document.querySelector('#confirm-title').textContent + ' ' + document.querySelector('#confirm-text').textContent`)
	for _, w := range []string{"OnDemand", project, "CPU:", "12000m"} {
		if !strings.Contains(confirm, w) {
			tab.errorf("the quota confirmation %q lacks %q", confirm, w)
		}
	}
	tab.do("confirm the quota", 30*time.Second,
		chromedp.Click(chromedp.CSS("#confirm-ok")),
	)
	pollJS[bool](tab, "the quota changed", 10*time.Second, `document.querySelector('#quota-status').textContent.includes('changed')`)
	status, body = consoleCall(t, http.MethodGet, "/v1/projects/"+project+"/quota", admin, nil)
	var q computeapi.Quota
	if status != http.StatusOK || json.Unmarshal(body, &q) != nil {
		t.Fatalf("quota: %d %s", status, body)
	}
	var cpu int64 = -1
	for _, tq := range q.Tiers {
		if tq.Tier == "OnDemand" {
			cpu = tq.Limit.MilliCPU
		}
	}
	if cpu != 12000 {
		t.Errorf("the API's OnDemand CPU limit %d, want 12000: %s", cpu, body)
	}

	// Both changes are on the audit stream, by the admin who made them.
	seen := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !(seen["label"] && seen["set-quota"]) {
		m, err := audit.NextMsg(time.Second)
		if err != nil {
			continue
		}
		var rec struct{ Subject, Verb, Outcome, Path string }
		if json.Unmarshal(m.Data, &rec) == nil && rec.Subject == subject && rec.Outcome == "success" {
			seen[rec.Verb] = true
		}
	}
	if !seen["label"] || !seen["set-quota"] {
		t.Errorf("audit records of the admin's changes: %v, want label and set-quota", seen)
	}
}
