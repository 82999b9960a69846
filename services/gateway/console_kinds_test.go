package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/browsertest"
	"atoll.dev/libs/bus"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// fakeOperate is the operation the gateway sends admission's operate
// endpoint (gateway.operation), strictly decoded as admission does.
type fakeOperate struct {
	Project   string `json:"project"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Op        string `json:"op"`
	Container string `json:"container,omitempty"`
	Replicas  *int32 `json:"replicas,omitempty"`
}

// fakeRollouts plays admission's operate endpoint for rollout operations
// and the aggregator's rollout controller: it records each operation in
// the App (control.rollout, a new generation) as admission does, then
// writes the rollout the controller would (a pause holds it with "paused
// by a user"). The region e2e tests check the real services.
type fakeRollouts struct {
	bus *bus.Bus
	mu  sync.Mutex
	ops []string // "<principal> <op> <kind>/<name>"
}

func (f *fakeRollouts) operate(ctx context.Context, op fakeOperate, r micro.Request) (any, error) {
	f.mu.Lock()
	f.ops = append(f.ops, r.Headers().Get(bus.HeaderPrincipal)+" "+op.Op+" "+op.Kind+"/"+op.Name)
	f.mu.Unlock()
	if op.Op != api.OpRolloutPause && op.Op != api.OpRolloutResume && op.Op != api.OpRolloutUndo {
		return nil, bus.Errorf(http.StatusBadRequest, "Invalid", "the fake knows rollout operations only, not %q", op.Op)
	}
	key := api.Key(op.Project, op.Kind, op.Name)
	var stored *api.Workload
	if err := f.change(ctx, bus.BucketWorkloads, key, func(b []byte) (any, error) {
		w, err := api.Decode(b)
		if err != nil {
			return nil, err
		}
		w.Control.Rollout = &api.RolloutControl{Paused: op.Op == api.OpRolloutPause, At: time.Now().UTC(), Op: op.Op}
		w.Metadata.Generation++
		stored = w
		return w, nil
	}); err != nil {
		return nil, err
	}
	if err := f.change(ctx, bus.BucketRollouts, key, func(b []byte) (any, error) {
		var ro api.Rollout
		if err := json.Unmarshal(b, &ro); err != nil {
			return nil, err
		}
		switch op.Op {
		case api.OpRolloutPause:
			ro.Phase, ro.Message = api.RolloutPaused, "paused by a user"
		case api.OpRolloutResume:
			ro.Phase, ro.Message = api.RolloutProgressing, ""
		}
		ro.Updated = time.Now().UTC()
		return ro, nil
	}); err != nil {
		return nil, err
	}
	return stored, nil
}

// change rewrites one key of a bucket.
func (f *fakeRollouts) change(ctx context.Context, bucket, key string, fn func([]byte) (any, error)) error {
	kv, err := f.bus.KV(ctx, bucket)
	if err != nil {
		return err
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return err
	}
	v, err := fn(e.Value())
	if err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = kv.Update(ctx, key, b, e.Revision())
	return err
}

// TestConsoleKindCards: the console's workload page shows what the kinds'
// statuses carry beyond the counts. A CronJob's card names its cluster,
// schedule, last schedule and success, and its runs with their outcome; a
// Daemon's lists each cluster's counts with the clusters behind
// highlighted; a Pod's lists its containers with their restarts and its
// volume; a TrainingJob's its gang and ranks. An App's rollout card lists
// the zones in rollout order with their state, and its Pause button (shown
// to a developer, hidden from a viewer) calls the API, whose answer and
// the paused rollout are drawn with the reason.
func TestConsoleKindCards(t *testing.T) {
	browsertest.Skip(t)
	g := newTestGateway(t, gateway.Config{RatePerSecond: 1000, Burst: 1000})
	f := &fakeRollouts{bus: g.Bus}
	eps, err := g.Bus.Serve(t.Context(), bus.ServeConfig{Name: "admission"}, bus.Endpoint("operate", 5*time.Second, f.operate))
	require.NoError(t, err)
	t.Cleanup(func() { _ = eps.Stop() })
	dev, _ := g.GW.Auth().Mint(auth.Identity{Subject: "dev", Roles: map[string]auth.Role{"p": auth.RoleDeveloper}})
	viewer, _ := g.GW.Auth().Mint(auth.Identity{Subject: "ann", Roles: map[string]auth.Role{"p": auth.RoleViewer}})
	seedKindCards(t, g)

	tab := consoleTab(t)
	wait := func(what, expr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 30*time.Second)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
			text, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('main').innerText`))
			t.Fatalf("console: %s: %v\npage:\n%.3000s", what, err, text)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(tab, chromedp.Evaluate[string](`(document.querySelector(`+jsString(sel)+`) || {innerText: ''}).innerText`))
		require.NoError(t, err, sel)
		return s
	}
	open := func(kind, name string) {
		t.Helper()
		// A new fragment is a navigation within the page: the console routes on hashchange.
		_, err := chromedp.Run(tab, chromedp.Evaluate[string](`(location.hash = '#/p/p/`+kind+`/`+name+`')`))
		require.NoError(t, err, "open %s/%s", kind, name)
		wait("the "+kind+" shown", `document.querySelector('#detail-title').textContent === '`+kind+` `+name+`'
			&& document.querySelector('#detail-status').textContent.startsWith('live')`)
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(ctx, steps...), what)
	}
	run("sign in as a developer",
		chromedp.Navigate(g.URL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), dev),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#whoami")),
	)

	// The CronJob: its cluster, schedule, times and runs, newest first.
	open("CronJob", "tick")
	cron := `#kind-cards .card[data-card="cronjob"]`
	wait("the CronJob card", `(() => { const c = document.querySelector('`+cron+`');
		return !!c && !c.hidden && c.querySelectorAll('tr[data-run]').length === 3; })()`)
	for field, want := range map[string]string{
		"cluster": "zone-b", "schedule": "*/5 * * * * (Europe/Paris)", "concurrency": "Forbid", "active": "1", "suspended": "no",
	} {
		assert.Equal(t, want, text(cron+` dd[data-field="`+field+`"]`), field)
	}
	for _, field := range []string{"last-schedule", "last-success"} {
		assert.Contains(t, text(cron+` dd[data-field="`+field+`"]`), "ago", field)
	}
	runs, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+cron+` tr[data-run]')].map((r) => r.dataset.run + ' ' + r.dataset.outcome + ' ' + r.innerText.replace(/\s+/g, ' '))`))
	require.NoError(t, err)
	require.Len(t, runs, 3)
	assert.True(t, strings.HasPrefix(runs[0], "tick-110 Active tick-110 zone-b"), runs[0])
	assert.True(t, strings.HasPrefix(runs[1], "tick-105 Failed tick-105 zone-b"), runs[1])
	assert.True(t, strings.HasSuffix(runs[1], "Failed 0 1"), runs[1])
	assert.True(t, strings.HasPrefix(runs[2], "tick-100 Succeeded tick-100 zone-a"), runs[2])
	assert.True(t, hidden(t, tab, "#rollout-card"), "no rollout card on a CronJob")
	screenshot(t, tab, "cronjob-card.png")

	// The Daemon: counts per cluster, zone-c behind and highlighted.
	open("Daemon", "agent")
	daemon := `#kind-cards .card[data-card="daemon"]`
	wait("the Daemon card", `(() => { const c = document.querySelector('`+daemon+`');
		return !!c && !c.hidden && c.querySelectorAll('tr[data-cluster]').length === 3; })()`)
	assert.True(t, hidden(t, tab, cron), "the CronJob card is hidden on a Daemon")
	assert.Contains(t, attr(t, tab, daemon, "class"), "warn", "a Daemon with a cluster behind is marked")
	assert.Equal(t, "zone-c, zone-d", text(daemon+` dd[data-field="behind"]`))
	assert.Equal(t, "4 of 5 pods, 5 updated", text(daemon+` dd[data-field="ready"]`))
	rows, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+daemon+` tbody tr')].map((r) =>
		(r.dataset.cluster ?? '') + '|' + (r.dataset.behind ?? '') + '|' + r.className + '|' + r.innerText.replace(/\s+/g, ' ').trim())`))
	require.NoError(t, err)
	assert.Equal(t, []string{
		"zone-a|false||zone-a 2 2 2 2 up to date",
		"zone-c|true|behind|zone-c 3 3 2 3 behind",
		"zone-d|true|behind|zone-d 0 0 0 0 behind",
		"||total|Total 5 5 4 5",
	}, rows, "per cluster desired/current/ready/updated; zone-d is behind before it reports counts")
	screenshot(t, tab, "daemon-card.png")

	// The Pod: its cluster, containers (a sidecar's restart) and volume.
	open("Pod", "notebook")
	pod := `#kind-cards .card[data-card="pod"]`
	wait("the Pod card", `(() => { const c = document.querySelector('`+pod+`');
		return !!c && !c.hidden && c.querySelectorAll('tr[data-container]').length === 2; })()`)
	assert.True(t, hidden(t, tab, daemon), "the Daemon card is hidden on a Pod")
	assert.Equal(t, "zone-a", text(pod+` dd[data-field="cluster"]`))
	assert.Equal(t, "notebook-data · Bound · 1Gi · pv-1", text(pod+` dd[data-field="volume"]`))
	assert.Equal(t, "1", text(pod+` tr[data-container="proxy"][data-type="sidecar"] td[data-field="restarts"]`))
	assert.Equal(t, "0", text(pod+` tr[data-container="main"][data-type="container"] td[data-field="restarts"]`))

	// The TrainingJob: its gang's cluster, attempts and requeues, ranks in order.
	open("TrainingJob", "train")
	gang := `#kind-cards .card[data-card="training"]`
	wait("the TrainingJob card", `(() => { const c = document.querySelector('`+gang+`');
		return !!c && !c.hidden && c.querySelectorAll('tr[data-rank]').length === 2; })()`)
	assert.True(t, hidden(t, tab, pod), "the Pod card is hidden on a TrainingJob")
	for field, want := range map[string]string{"cluster": "zone-c", "workers": "2", "attempt": "2", "requeues": "1", "last-requeue": "not all Running within 300s"} {
		assert.Equal(t, want, text(gang+` dd[data-field="`+field+`"]`), field)
	}
	ranks, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+gang+` tr[data-rank]')].map((r) => r.innerText.replace(/\s+/g, ' ').trim())`))
	require.NoError(t, err)
	assert.Equal(t, []string{"0 train-0-y Running n1 2", "1 train-1-x Pending 0"}, ranks, "ranks in order with pod, phase, node and restarts")

	// The App: zones in rollout order with their state; Pause for a developer.
	open("App", "web")
	wait("the rollout card", `(() => { const c = document.querySelector('#rollout-card');
		return !c.hidden && c.dataset.rolloutPhase === 'Progressing' && c.querySelectorAll('#rollout-zones tr[data-zone]').length === 3
		  && !document.querySelector('#rollout-actions').hidden && !document.querySelector('#rollout-pause').disabled; })()`)
	assert.True(t, hidden(t, tab, gang), "the TrainingJob card is hidden on an App")
	assert.Equal(t, "c → a → b", text(`#rollout-meta dd[data-field="order"]`))
	assert.Equal(t, "RollbackZone", text(`#rollout-meta dd[data-field="policy"]`))
	zones, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#rollout-zones tr[data-zone]')].map((r) =>
		r.dataset.zone + ' ' + r.dataset.state + ' ' + ['started', 'available', 'finished'].map((f) => r.querySelector('td[data-field="' + f + '"]').textContent ? f : '-').join(','))`))
	require.NoError(t, err)
	assert.Equal(t, []string{"c Done started,available,finished", "a Baking started,available,-", "b Pending -,-,-"}, zones)
	assert.True(t, hidden(t, tab, "#rollout-resume"), "no Resume while it progresses")
	assert.False(t, hidden(t, tab, "#rollout-undo"), "Undo while a target rolls out")
	assert.True(t, hidden(t, tab, "#rollout-reason"))

	run("pause the rollout from the console",
		chromedp.Click(chromedp.CSS("#rollout-pause")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
	)
	wait("the rollout paused, with the reason", `(() => { const r = document.querySelector('#rollout-reason');
		return document.querySelector('#rollout-card').dataset.rolloutPhase === 'Paused' && !r.hidden && r.dataset.paused === 'true'
		  && r.textContent === 'Paused: paused by a user' && !document.querySelector('#rollout-resume').hidden
		  && document.querySelector('#rollout-pause').hidden; })()`)
	f.mu.Lock()
	assert.Equal(t, []string{"dev " + api.OpRolloutPause + " App/web"}, f.ops, "one pause, by the developer signed in")
	f.mu.Unlock()
	assert.True(t, strings.HasPrefix(text(`#rollout-meta dd[data-field="last-op"]`), api.OpRolloutPause), "the App the API answered is drawn")
	assert.True(t, strings.HasPrefix(text("#rollout-status"), "pause requested"), text("#rollout-status"))
	assert.Empty(t, text("#rollout-op-error")+text("#rollout-error")+text("#detail-error"), "the console showed an error")
	screenshot(t, tab, "rollout-card.png")

	// A viewer sees the rollout but not its buttons.
	run("sign in as a viewer",
		chromedp.Click(chromedp.CSS("#signout")),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), viewer),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#whoami")),
	)
	open("App", "web")
	wait("the rollout card for a viewer", `(() => { const c = document.querySelector('#rollout-card');
		return document.querySelector('#whoami').textContent === 'ann' && !document.querySelector('#detail-view').hidden && !c.hidden && c.dataset.rolloutPhase === 'Paused' && c.querySelectorAll('#rollout-zones tr[data-zone]').length === 3; })()`)
	assert.True(t, hidden(t, tab, "#rollout-actions"), "a viewer gets no rollout buttons")
	f.mu.Lock()
	assert.Len(t, f.ops, 1, "the viewer made no call")
	f.mu.Unlock()
}

// seedKindCards stores, as admission and the aggregator would, project p's
// CronJob tick, Daemon agent, App web, Pod notebook and TrainingJob train
// with their statuses and the App's rollout, and waits until the gateway
// serves them.
func seedKindCards(t *testing.T, g *testGateway) {
	t.Helper()
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Second)
	at := func(d time.Duration) *time.Time { v := now.Add(-d); return &v }
	tmpl := api.PodTemplate{Containers: []api.Container{{Name: "main", Image: "busybox",
		Resources: api.Resources{Requests: api.ResourceList{CPU: "10m", Memory: "16Mi"}}}}}
	meta := func(name string) api.Metadata {
		return api.Metadata{Project: "p", Name: name, Generation: 1, UID: "uid-" + name, Created: now.Add(-time.Hour), Updated: now.Add(-time.Hour)}
	}
	bake, deadline, replicas := int32(30), int32(300), int32(3)
	docs := []struct {
		w  *api.Workload
		st *api.Status
	}{
		{&api.Workload{APIVersion: api.APIVersion, Kind: api.KindCronJob, Metadata: meta("tick"),
			Spec: &api.CronJobSpec{Common: api.Common{Template: tmpl}, Schedule: "*/5 * * * *", TimeZone: "Europe/Paris", ConcurrencyPolicy: "Forbid"}},
			&api.Status{Phase: api.PhaseRunning, Desired: 1, Running: 1, CronJob: &api.CronJobStatus{
				Cluster: "zone-b", LastScheduleTime: at(time.Minute), LastSuccessfulTime: at(11 * time.Minute), Active: 1,
				Runs: []api.CronJobRun{
					{Name: "tick-100", Cluster: "zone-a", ScheduledTime: at(11 * time.Minute), Outcome: api.RunSucceeded, Succeeded: 1},
					{Name: "tick-105", Cluster: "zone-b", ScheduledTime: at(6 * time.Minute), Outcome: api.RunFailed, Failed: 1},
					{Name: "tick-110", Cluster: "zone-b", ScheduledTime: at(time.Minute), Outcome: api.RunActive},
				}}}},
		{&api.Workload{APIVersion: api.APIVersion, Kind: api.KindDaemon, Metadata: meta("agent"),
			Spec: &api.DaemonSpec{Common: api.Common{Template: tmpl}, MaxUnavailable: 1}},
			&api.Status{Phase: api.PhaseProgressing, Desired: 5, Ready: 4, Daemon: &api.DaemonStatus{
				DaemonCounts: api.DaemonCounts{Desired: 5, Current: 5, Ready: 4, Updated: 5}, Behind: []string{"zone-c", "zone-d"},
				Clusters: map[string]api.DaemonCounts{
					"zone-a": {Desired: 2, Current: 2, Ready: 2, Updated: 2},
					"zone-c": {Desired: 3, Current: 3, Ready: 2, Updated: 3},
				}}}},
		{&api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp, Metadata: meta("web"),
			Spec: &api.AppSpec{Common: api.Common{Template: tmpl}, Replicas: &replicas,
				Rollout: &api.RolloutStrategy{Order: []string{"c", "a", "b"}, BakeSeconds: &bake, DeadlineSeconds: &deadline, OnFailure: api.RolloutRollbackZone}}},
			&api.Status{Phase: api.PhaseProgressing, Desired: 3, Ready: 3}},
		{&api.Workload{APIVersion: api.APIVersion, Kind: api.KindPod, Metadata: meta("notebook"),
			Spec: &api.PodSpec{Common: api.Common{Template: tmpl}}},
			&api.Status{Phase: api.PhaseRunning, Desired: 1, Ready: 1, Running: 1, Pod: &api.PodStatus{Cluster: "zone-a", UID: "0c0ffee0",
				Containers: []api.ContainerStatus{
					{Name: "proxy", Type: api.ContainerSidecar, Image: "envoy:1.31", RestartCount: 1, Ready: true, State: "Running"},
					{Name: "main", Type: api.ContainerMain, Image: "busybox", Ready: true, State: "Running"},
				},
				Volume: &api.VolumeStatus{Claim: "notebook-data", Phase: "Bound", Capacity: "1Gi", VolumeName: "pv-1"}}}},
		{&api.Workload{APIVersion: api.APIVersion, Kind: api.KindTrainingJob, Metadata: meta("train"),
			Spec: &api.TrainingJobSpec{Common: api.Common{Template: tmpl}, Workers: 2}},
			&api.Status{Phase: api.PhaseProgressing, Desired: 2, Ready: 1, Running: 1, Training: &api.TrainingStatus{
				Cluster: "zone-c", Workers: 2, Attempt: 2, Requeues: 1, LastRequeue: "not all Running within 300s", PlacedAt: at(time.Minute),
				Ranks: []api.TrainingRank{{Rank: 1, Pod: "train-1-x", Phase: "Pending"}, {Rank: 0, Pod: "train-0-y", Phase: "Running", Node: "n1", Restarts: 2}}}}},
	}
	put := func(bucket, key string, v any) {
		kv, err := g.Bus.KV(ctx, bucket)
		require.NoError(t, err)
		b, err := json.Marshal(v)
		require.NoError(t, err)
		_, err = kv.Put(ctx, key, b)
		require.NoError(t, err)
	}
	for _, d := range docs {
		d.st.Key, d.st.Generation = d.w.Key(), 1
		put(bus.BucketStatus, d.st.Key, d.st)
		put(bus.BucketWorkloads, d.w.Key(), d.w)
	}
	web := api.Key("p", api.KindApp, "web")
	put(bus.BucketRollouts, web, api.Rollout{Key: web, Phase: api.RolloutProgressing, Stable: "0a1b2c3d", Target: "4e5f6a7b", Updated: now,
		Zones: []api.ZoneRollout{
			{Zone: "c", State: api.ZoneDone, Revision: "4e5f6a7b", Started: now.Add(-3 * time.Minute), AvailableSince: now.Add(-150 * time.Second), Finished: now.Add(-2 * time.Minute)},
			{Zone: "a", State: api.ZoneBaking, Revision: "4e5f6a7b", Started: now.Add(-2 * time.Minute), AvailableSince: now.Add(-10 * time.Second)},
			{Zone: "b", State: api.ZonePending, Revision: "0a1b2c3d"},
		}})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, path := range []string{"CronJob/tick", "Daemon/agent", "App/web", "Pod/notebook", "TrainingJob/train"} {
			resp, b := g.do(c, "GET", "/v1/projects/p/workloads/"+path, g.Admin, nil)
			assert.Equal(c, http.StatusOK, resp.StatusCode, "GET %s: %s", path, b)
		}
	}, 10*time.Second, 20*time.Millisecond)
}

// screenshot keeps the page as a person sees it, with `go test -artifacts`.
func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("no screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err == nil {
		t.Logf("screenshot: %s", path)
	}
}

// hidden says whether the first element sel matches is hidden (by its
// hidden property; an element missing counts as hidden).
func hidden(t *testing.T, tab context.Context, sel string) bool {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Evaluate[bool](`(document.querySelector(`+jsString(sel)+`)?.hidden ?? true)`))
	require.NoError(t, err, "%s hidden", sel)
	return v
}

// attr reads an attribute of the first element sel matches ("" when it
// has none).
func attr(t *testing.T, tab context.Context, sel, name string) string {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Evaluate[string](`(document.querySelector(`+jsString(sel)+`)?.getAttribute(`+jsString(name)+`) ?? '')`))
	require.NoError(t, err, "%s[%s]", sel, name)
	return v
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// consoleTab starts a headless Chromium with a fresh profile and returns
// the context of its one tab; the page must throw nothing.
func consoleTab(t *testing.T) context.Context {
	t.Helper()
	return browsertest.Open(t, browsertest.Options{Width: 1280, Height: 1600, Timeout: 3 * time.Minute}).Ctx
}

// TestConsoleShowsWhatApplies: a workload's page shows only what its kind
// supports (GET /v1/kinds), whatever the case of the kind in the route. A
// Scaler's page, reached as #/p/p/scaler/web, is titled "Scaler web" and
// draws its decisions, with no logs, replica tables, ready count, Restart,
// Stop or Scale, and Pause offered (pausing a Scaler is how to scale its
// App by hand). A Pod's page has logs and Restart but no Scale or Pause;
// an App's page every button.
func TestConsoleShowsWhatApplies(t *testing.T) {
	browsertest.Skip(t)
	g := newTestGateway(t, gateway.Config{RatePerSecond: 1000, Burst: 1000})
	dev, _ := g.GW.Auth().Mint(auth.Identity{Subject: "dev", Roles: map[string]auth.Role{"p": auth.RoleDeveloper}})
	seedKindCards(t, g)
	seedScaler(t, g)

	tab := consoleTab(t)
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(g.URL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), dev),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#whoami")),
	), "sign in")

	panels := []string{"#logs-card", "#replicas-card", "#detail-ready", "#scaler-card", "#op-scale", "#op-pause", "#op-restart", "#op-stop", "#op-delete"}
	tests := []struct {
		route, title string
		shown        []string // of panels; the others are hidden
	}{
		{"scaler/web", "Scaler web", []string{"#scaler-card", "#op-pause", "#op-delete"}},
		{"Scaler/web", "Scaler web", []string{"#scaler-card", "#op-pause", "#op-delete"}},
		{"pod/notebook", "Pod notebook", []string{"#logs-card", "#replicas-card", "#detail-ready", "#op-restart", "#op-stop", "#op-delete"}},
		{"APP/web", "App web", []string{"#logs-card", "#replicas-card", "#detail-ready", "#op-scale", "#op-pause", "#op-restart", "#op-stop", "#op-delete"}},
	}
	for _, tc := range tests {
		t.Run(tc.route, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(tab, 30*time.Second)
			defer cancel()
			_, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(location.hash = '#/p/p/`+tc.route+`')`))
			require.NoError(t, err)
			_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('#detail-title').textContent === '`+tc.title+`'
				&& document.querySelector('#detail-status').textContent.startsWith('live')
				&& !document.querySelector('#op-delete').disabled`, chromedp.WithPollingInterval(100*time.Millisecond)))
			require.NoError(t, err, "the page of %s", tc.title)
			var shown []string
			for _, sel := range panels {
				if !hidden(t, tab, sel) {
					shown = append(shown, sel)
				}
			}
			assert.Equal(t, tc.shown, shown, "what the page shows")
			if strings.HasPrefix(tc.title, "Scaler") {
				_, err = chromedp.Run(ctx, chromedp.Poll[bool](`!!document.querySelector('#chart-scaler svg circle[data-replicas="3"]')`, chromedp.WithPollingInterval(100*time.Millisecond)))
				require.NoError(t, err, "the Scaler's decision chart")
				assert.Empty(t, text(t, tab, "#logs-status")+text(t, tab, "#logs")+text(t, tab, "#scaler-error"), "no logs asked, no error")
			}
		})
	}
	screenshot(t, tab, "app-page.png")
}

// seedScaler stores project p's Scaler web (of App web) and one decision
// the autoscaler would record, and waits until the gateway serves it.
func seedScaler(t *testing.T, g *testGateway) {
	t.Helper()
	ctx := t.Context()
	w := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindScaler,
		Metadata: api.Metadata{Project: "p", Name: "web", Generation: 1, UID: "uid-scaler"},
		Spec: &api.ScalerSpec{Target: "web", MaxReplicas: 5,
			Metrics: []api.ScalerMetric{{Type: api.MetricCustom, Name: "qps", TargetPerPod: 100}}}}
	decisions := map[string]any{"decisions": []map[string]any{{
		"at": time.Now().UTC().Add(-time.Minute), "generation": 1, "current": 1, "ready": 1, "desired": 3, "raw": 3,
		"outcome": "scaled", "reason": "qps above target",
		"proposals": []map[string]any{{"metric": "qps", "value": 300, "target": 100, "ratio": 3, "replicas": 3, "state": "ok"}},
	}}}
	for bucket, v := range map[string]any{bus.BucketWorkloads: w, bus.BucketScalers: decisions} {
		kv, err := g.Bus.KV(ctx, bucket)
		require.NoError(t, err)
		b, err := json.Marshal(v)
		require.NoError(t, err)
		_, err = kv.Put(ctx, w.Key(), b)
		require.NoError(t, err)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, b := g.do(c, "GET", "/v1/projects/p/workloads/scaler/web", g.Admin, nil)
		assert.Equal(c, http.StatusOK, resp.StatusCode, "GET scaler/web: %s", b)
	}, 10*time.Second, 20*time.Millisecond)
}

// text reads the innerText of the first element sel matches ("" when none).
func text(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(tab, chromedp.Evaluate[string](`(document.querySelector(`+jsString(sel)+`) || {innerText: ''}).innerText`))
	require.NoError(t, err, sel)
	return s
}
