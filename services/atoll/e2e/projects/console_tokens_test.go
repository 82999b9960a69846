package projects

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/browsertest"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/atoll/e2e"
)

// tokensOnPage reads the tokens page's table: "<name> <role> <expires>"
// per row, the expiry as the API gave it.
const tokensOnPage = `[...document.querySelectorAll('#tokens tbody tr')].map((tr) =>
	tr.dataset.token + ' ' + tr.dataset.role + ' ' + tr.querySelector('td[data-field=expires]').dataset.expires)`

// queueOnPage reads the platform admins' queue: "<project> <id> <state>" per row.
const queueOnPage = `[...document.querySelectorAll('#queue tbody tr')].map((tr) =>
	tr.dataset.project + ' ' + tr.dataset.request + ' ' + tr.dataset.state)`

// TestConsoleTokensAndQuotaRequests drives the console in Chromium: a
// project admin creates a token for machines on the project's tokens
// page (a refused lifetime shows the API's error), sees its secret once,
// sees it listed with its role and expiry, and revokes it, after which
// the API refuses the token; then asks for more quota (a request without
// a reason shows the API's refusal); a platform admin sees the request
// in the queue, is refused a rejection without a reason, approves it,
// and the requester's page shows it approved. Each step is checked
// against the API.
func TestConsoleTokensAndQuotaRequests(t *testing.T) {
	e2e.Need(t)
	browsertest.Skip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	suffix := time.Now().UnixNano() % 100000
	project, dana := fmt.Sprintf("con-tok-%d", suffix), fmt.Sprintf("dana-%d", suffix)
	admin := client(t, reg.GatewayURL, reg.AdminToken)
	_, err := admin.CreateProject(ctx, computeapi.ProjectCreate{Name: project, Owner: dana})
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.DeleteProject(context.Background(), project) })

	b := browsertest.Start(t, browsertest.Options{Timeout: 3 * time.Minute})
	tab := b.NewTab(t)
	eval := func(tab *browsertest.Tab, what, expr string) []string {
		t.Helper()
		got, err := chromedp.Run(tab.Ctx, chromedp.Evaluate[[]string](expr))
		require.NoError(t, err, what)
		return got
	}
	apiTokens := func() []string {
		t.Helper()
		ts, err := admin.Tokens(ctx, project)
		require.NoError(t, err)
		out := []string{}
		for _, tk := range ts {
			assert.Empty(t, tk.Secret, "a listed token carries no secret")
			out = append(out, tk.Name+" "+tk.Role+" "+tk.Expires.UTC().Format(time.RFC3339Nano))
		}
		return out
	}

	// Dana, the project's admin, opens its tokens page from its members page.
	tab.Do("sign in as the project's admin", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/#/p/"+project+"/members"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), reg.Token(dana, false, nil)),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#members-view")),
		chromedp.Click(chromedp.CSS("#members-tokens-link")),
		chromedp.WaitVisible(chromedp.CSS("#tokens-view")),
	)
	tab.WaitTrue("the empty list is loaded", `!document.querySelector('#tokens-empty').hidden`)

	// A lifetime the API refuses: its error shows, no token is made.
	tab.Do("create a token with a bad lifetime", 30*time.Second,
		chromedp.SendKeys(chromedp.CSS("#token-name"), "ci"),
		chromedp.SetValue(chromedp.CSS("#token-role"), "viewer"),
		chromedp.SetValue(chromedp.CSS("#token-ttl"), "forever"),
		chromedp.Click(chromedp.CSS("#token-create")),
	)
	tab.WaitTrue("the refusal shows", `!document.querySelector('#tokens-op-error').hidden && document.querySelector('#tokens-op-error').textContent.includes('ttl')`)
	assert.Empty(t, apiTokens(), "the API after the refused create")

	// The token: its secret once, then listed with its role and expiry.
	tab.Do("create a token", 30*time.Second,
		chromedp.SetValue(chromedp.CSS("#token-ttl"), "720h"),
		chromedp.Click(chromedp.CSS("#token-create")),
		chromedp.WaitVisible(chromedp.CSS("#token-secret-card")),
	)
	secret := eval(tab, "read the secret", `[document.querySelector('#token-secret').textContent]`)[0]
	require.NotEmpty(t, secret, "the secret shown")
	tab.WaitTrue("ci listed", `!!document.querySelector('#tokens tr[data-token="ci"]')`)
	want := apiTokens()
	require.Len(t, want, 1, "the API after the create")
	assert.Equal(t, want, eval(tab, "read the tokens", tokensOnPage), "the tokens page lists what the API does")
	assert.Contains(t, want[0], "ci viewer ")
	byToken := client(t, reg.GatewayURL, secret)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 200, listStatus(ctx, byToken, project))
	}, 5*time.Second, 20*time.Millisecond, "the secret the page showed works")

	// Dismissed, the secret is gone from the page, and coming back shows it no more.
	tab.Do("dismiss the secret", 30*time.Second,
		chromedp.Click(chromedp.CSS("#token-secret-done")),
		chromedp.WaitNotVisible(chromedp.CSS("#token-secret-card")),
		chromedp.Click(chromedp.CSS("#tokens-back")),
		chromedp.WaitVisible(chromedp.CSS("#members-view")),
		chromedp.Click(chromedp.CSS("#members-tokens-link")),
		chromedp.WaitVisible(chromedp.CSS("#tokens-view")),
	)
	tab.WaitTrue("ci listed again", `!!document.querySelector('#tokens tr[data-token="ci"]')`)
	tab.WaitTrue("the secret is nowhere on the page", fmt.Sprintf(`!document.documentElement.outerHTML.includes(%q) && document.querySelector('#token-secret-card').hidden`, secret))

	// Revoke, confirming in the dialog: gone from the page and the API,
	// and the API refuses the token.
	tab.Do("revoke ci", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#tokens tr[data-token="ci"] button.token-revoke`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
	)
	tab.WaitTrue("ci gone from the page", `!document.querySelector('#tokens tr[data-token="ci"]')`)
	assert.Empty(t, apiTokens(), "the API after the revoke")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 401, listStatus(ctx, byToken, project))
	}, 5*time.Second, 20*time.Millisecond, "the API refuses the revoked token")

	// The quota page: a request without a reason is refused by the API.
	tab.Do("open the quota requests page", 30*time.Second,
		chromedp.Click(chromedp.CSS("#tokens-back")),
		chromedp.WaitVisible(chromedp.CSS("#members-view")),
		chromedp.Click(chromedp.CSS("#members-quota-link")),
		chromedp.WaitVisible(chromedp.CSS("#quota-requests-view")),
	)
	tab.WaitTrue("the empty list is loaded", `!document.querySelector('#quota-requests-empty').hidden`)
	tab.Do("request quota without a reason", 30*time.Second,
		chromedp.SetValue(chromedp.CSS("#qr-tier"), "OnDemand"),
		chromedp.SendKeys(chromedp.CSS("#qr-cpu"), "64"),
		chromedp.Click(chromedp.CSS("#qr-submit")),
	)
	tab.WaitTrue("the refusal shows", `!document.querySelector('#qr-error').hidden && document.querySelector('#qr-error').textContent.includes('reason')`)
	reqs, err := admin.QuotaRequests(ctx, project, "")
	require.NoError(t, err)
	assert.Empty(t, reqs, "the API after the refused request")

	tab.Do("request quota", 30*time.Second,
		chromedp.SendKeys(chromedp.CSS("#qr-reason"), "launch"),
		chromedp.Click(chromedp.CSS("#qr-submit")),
	)
	tab.WaitTrue("the request listed pending", `document.querySelector('#quota-requests tbody tr')?.dataset.state === 'pending'`)
	reqs, err = admin.QuotaRequests(ctx, project, "")
	require.NoError(t, err)
	require.Len(t, reqs, 1, "the API after the request")
	qr := reqs[0]
	assert.Equal(t, computeapi.QuotaRequestState("pending"), qr.State)
	assert.Equal(t, "launch", qr.Reason)
	assert.Equal(t, dana, qr.Requester)
	assert.Equal(t, "OnDemand", qr.Tier)
	if assert.NotNil(t, qr.Limit.MilliCPU) {
		assert.Equal(t, int64(64000), *qr.Limit.MilliCPU)
	}
	assert.Equal(t, []string{qr.Id}, eval(tab, "read the requests", `[...document.querySelectorAll('#quota-requests tbody tr')].map((tr) => tr.dataset.request)`))

	// A platform admin's queue lists it.
	at := b.NewTab(t)
	at.Do("sign in as a platform admin", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/#/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), reg.AdminToken),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#nav-quota-requests")),
		chromedp.Click(chromedp.CSS("#nav-quota-requests")),
		chromedp.WaitVisible(chromedp.CSS("#queue-view")),
	)
	row := fmt.Sprintf(`#queue tr[data-request=%q]`, qr.Id)
	at.WaitTrue("the request in the queue", fmt.Sprintf(`document.querySelector('%s')?.dataset.state === 'pending'`, row))
	pending, err := admin.QuotaRequests(ctx, "", "pending")
	require.NoError(t, err)
	var wantQueue []string
	for _, r := range pending {
		wantQueue = append(wantQueue, r.Project+" "+r.Id+" "+string(r.State))
	}
	assert.ElementsMatch(t, wantQueue, eval(at, "read the queue", queueOnPage), "the queue lists what GET /v1/quota/requests?state=pending does")

	// Rejecting without a reason: the API's refusal shows, nothing changes.
	at.Do("reject without a reason", 30*time.Second, chromedp.Click(chromedp.CSS(row+" button.queue-reject")))
	at.WaitTrue("the refusal shows", `!document.querySelector('#queue-op-error').hidden && document.querySelector('#queue-op-error').textContent.includes('reason')`)
	reqs, err = admin.QuotaRequests(ctx, project, "")
	require.NoError(t, err)
	require.Len(t, reqs, 1)
	assert.Equal(t, computeapi.QuotaRequestState("pending"), reqs[0].State, "the API after the refused rejection")

	// Approve, with a reason: the request leaves the pending queue.
	at.Do("approve", 30*time.Second,
		chromedp.SendKeys(chromedp.CSS(row+" input.queue-reason"), "ok for the launch"),
		chromedp.Click(chromedp.CSS(row+" button.queue-approve")),
	)
	at.WaitTrue("the request leaves the queue", fmt.Sprintf(`!document.querySelector('%s')`, row))
	reqs, err = admin.QuotaRequests(ctx, project, "")
	require.NoError(t, err)
	require.Len(t, reqs, 1)
	assert.Equal(t, computeapi.QuotaRequestState("approved"), reqs[0].State, "the API after the approval")
	assert.Equal(t, "ok for the launch", reqs[0].Decision)

	// The requester's page shows it approved, with the reviewer's reason.
	tab.WaitTrue("the request shows approved to its requester", `document.querySelector('#quota-requests tbody tr')?.dataset.state === 'approved'`)
	decision := eval(tab, "read the decision", `[document.querySelector('#quota-requests tbody tr td:last-child').textContent]`)
	assert.Equal(t, []string{reqs[0].Reviewer + ": ok for the launch"}, decision)
}
