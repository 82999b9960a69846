package projects

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/browsertest"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/atoll/e2e"
)

// membersOnPage reads the members page's table: "<kind>/<name> <role>"
// per row, and whether each row offers a role select and a remove button.
const membersOnPage = `[...document.querySelectorAll('#members tbody tr')].map((tr) =>
	tr.dataset.member + ' ' + tr.dataset.role + (tr.querySelector('select.member-role') ? ' select' : '') +
	(tr.querySelector('button.member-remove') ? ' remove' : ''))`

// projectsOnPage reads the projects page's list: "<name> <role>" per project.
const projectsOnPage = `[...document.querySelectorAll('#projects a[data-project]')].map((a) =>
	a.dataset.project + ' ' + a.querySelector('.badge').textContent)`

// TestConsoleProjectsAndMembers drives the console in Chromium: a plain
// user creates a project of its own on the projects page (self-service),
// lands on its members page as its admin, adds a member, changes the
// member's role and removes it, each checked against the API; demoting
// the last admin shows the API's refusal and changes nothing. The
// projects page lists a user's own projects only, a platform admin's
// every project, with the owner field only for the platform admin.
func TestConsoleProjectsAndMembers(t *testing.T) {
	e2e.Need(t)
	browsertest.Skip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	suffix := time.Now().UnixNano() % 100000
	mine, other := fmt.Sprintf("con-carol-%d", suffix), fmt.Sprintf("con-olga-%d", suffix)
	carol := fmt.Sprintf("carol-%d", suffix)
	admin := client(t, reg.GatewayURL, reg.AdminToken)
	_, err := admin.CreateProject(ctx, computeapi.ProjectCreate{Name: other, Owner: "olga"})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = admin.DeleteProject(context.Background(), mine)
		_ = admin.DeleteProject(context.Background(), other)
	})

	b := browsertest.Start(t, browsertest.Options{Timeout: 3 * time.Minute})
	tab := b.NewTab(t)
	eval := func(what, expr string) []string {
		t.Helper()
		got, err := chromedp.Run(tab.Ctx, chromedp.Evaluate[[]string](expr))
		require.NoError(t, err, what)
		return got
	}
	rows := func() []string { return eval("read the members", membersOnPage) }
	apiMembers := func() []string {
		t.Helper()
		ms, err := admin.Members(ctx, mine)
		require.NoError(t, err)
		var out []string
		for _, m := range ms {
			out = append(out, m.Kind+"/"+m.Name+" "+m.Role)
		}
		slices.Sort(out)
		return out
	}

	// Carol holds no role anywhere: the projects page offers the form.
	tab.Do("sign in as a plain user", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), reg.Token(carol, false, nil)),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#project-create-form")),
	)
	tab.WaitTrue("the owner field is for platform admins only", `document.querySelector('#project-create-owner-label').hidden`)

	// Create: the members page of the new project, carol its admin.
	tab.Do("create a project", time.Minute,
		chromedp.SendKeys(chromedp.CSS("#project-create-name"), mine),
		chromedp.SendKeys(chromedp.CSS("#project-create-display"), "Carol's shop"),
		chromedp.Click(chromedp.CSS("#project-create")),
		chromedp.WaitVisible(chromedp.CSS("#members-view")),
	)
	tab.WaitTrue("carol is the new project's admin", fmt.Sprintf(`document.querySelector('#members tr[data-member="user/%s"]')?.dataset.role === 'admin'`, carol))
	p, err := admin.Project(ctx, mine)
	require.NoError(t, err, "the project the console created")
	assert.Equal(t, carol, p.Owner)
	assert.Equal(t, "Carol's shop", p.DisplayName)
	assert.True(t, p.SelfService)
	owner := eval("read the owner", `[document.querySelector('#members-meta dd[data-field=owner]').textContent]`)
	assert.Equal(t, []string{carol}, owner)

	// Add dave as a developer.
	tab.Do("add a member", time.Minute,
		chromedp.SendKeys(chromedp.CSS("#member-name"), "dave"),
		chromedp.SetValue(chromedp.CSS("#member-role"), "developer"),
		chromedp.Click(chromedp.CSS("#member-add")),
	)
	tab.WaitTrue("dave listed as a developer", `document.querySelector('#members tr[data-member="user/dave"]')?.dataset.role === 'developer'`)
	want := []string{"user/" + carol + " admin", "user/dave developer"}
	assert.Equal(t, want, apiMembers(), "the API after the add")
	if diff := cmp.Diff([]string{"user/" + carol + " admin select remove", "user/dave developer select remove"}, rows()); diff != "" {
		t.Errorf("members page (-want +got):\n%s", diff)
	}

	// Make dave a viewer.
	tab.Do("change dave's role", 30*time.Second,
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('#members tr[data-member="user/dave"] select.member-role');
			s.value = 'viewer'; s.dispatchEvent(new Event('change')); })()`),
	)
	tab.WaitTrue("dave listed as a viewer", `document.querySelector('#members tr[data-member="user/dave"]')?.dataset.role === 'viewer'`)
	assert.Equal(t, []string{"user/" + carol + " admin", "user/dave viewer"}, apiMembers(), "the API after the role change")

	// Demoting the last admin: the API's refusal shows, nothing changes.
	tab.Do("demote the last admin", 30*time.Second,
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const s = document.querySelector('#members tr[data-member="user/%s"] select.member-role');
			s.value = 'developer'; s.dispatchEvent(new Event('change')); })()`, carol)),
	)
	tab.WaitTrue("the refusal shows", `!document.querySelector('#members-error').hidden && document.querySelector('#members-error').textContent.includes('admin')`)
	tab.WaitTrue("carol is still admin on the page", fmt.Sprintf(`document.querySelector('#members tr[data-member="user/%s"] select.member-role').value === 'admin'`, carol))
	assert.Equal(t, []string{"user/" + carol + " admin", "user/dave viewer"}, apiMembers(), "the API after the refused demotion")

	// Remove dave, confirming in the dialog.
	tab.Do("remove dave", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#members tr[data-member="user/dave"] button.member-remove`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
	)
	tab.WaitTrue("dave gone from the page", `!document.querySelector('#members tr[data-member="user/dave"]')`)
	assert.Equal(t, []string{"user/" + carol + " admin"}, apiMembers(), "the API after the removal")

	// Carol's projects page lists her project only.
	tab.Do("open the projects page", 30*time.Second, chromedp.Click(chromedp.CSS("#nav-projects")), chromedp.WaitVisible(chromedp.CSS("#projects-view")))
	tab.WaitTrue("carol's projects listed", `document.querySelectorAll('#projects a[data-project]').length > 0`)
	assert.Equal(t, []string{mine + " admin"}, eval("read carol's projects", projectsOnPage))

	// A platform admin's lists every project, and offers the owner field.
	at := b.NewTab(t)
	at.Do("sign in as a platform admin", time.Minute,
		chromedp.Navigate(reg.GatewayURL+"/console/#/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), reg.AdminToken),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#project-create-form")),
	)
	at.WaitTrue("both projects listed", fmt.Sprintf(`!!document.querySelector('#projects a[data-project=%q]') && !!document.querySelector('#projects a[data-project=%q]')`, mine, other))
	at.WaitTrue("the owner field shows", `!document.querySelector('#project-create-owner-label').hidden`)
	listed, err := chromedp.Run(at.Ctx, chromedp.Evaluate[[]string](projectsOnPage))
	require.NoError(t, err)
	ps, err := admin.Projects(ctx)
	require.NoError(t, err)
	var all []string
	for _, p := range ps {
		all = append(all, p.Name+" "+p.Role)
	}
	assert.ElementsMatch(t, all, listed, "a platform admin's projects page lists what GET /v1/projects answers")
}
