package region_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/atoll/e2e"
)

// call calls the gateway and returns the status and body; t is a test or
// the *assert.CollectT of a poll.
func call(t require.TestingT, method, path, token string, body []byte, hdr ...string) (int, []byte, http.Header) {
	req, err := http.NewRequest(method, reg.GatewayURL+path, bytes.NewReader(body))
	require.NoError(t, err, "%s %s", method, path)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// mustStatus is call that fails t unless the answer has status want.
func mustStatus(t require.TestingT, want int, method, path, token string, body []byte, hdr ...string) []byte {
	got, b, _ := call(t, method, path, token, body, hdr...)
	require.Equal(t, want, got, "%s %s: %s", method, path, b)
	return b
}

func gwApp(name string, replicas int, labels map[string]string) []byte {
	l, _ := json.Marshal(labels)
	return []byte(fmt.Sprintf(`{"kind":"App","metadata":{"name":%q,"labels":%s},
"spec":{"replicas":%d,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"50m","memory":"32Mi"}}}]}}}`, name, l, replicas))
}

// waitPhase waits until the workload at path is in phase, and returns it.
func waitPhase(t *testing.T, token, path, phase string) computeapi.Workload {
	t.Helper()
	return waitWorkload(t, token, path, func(ct *assert.CollectT, w computeapi.Workload) {
		assert.Equal(ct, phase, w.Status.Phase, "phase (generation %d, observed %d, conditions %+v)",
			w.Metadata.Generation, w.Status.ObservedGeneration, w.Status.Conditions)
	})
}

// waitWorkload reads the workload at path until check passes, for up to
// 90 seconds, and returns it.
func waitWorkload(t *testing.T, token, path string, check func(*assert.CollectT, computeapi.Workload)) computeapi.Workload {
	t.Helper()
	var w computeapi.Workload
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, b, _ := call(ct, "GET", path, token, nil)
		w = computeapi.Workload{}
		require.NoError(ct, json.Unmarshal(b, &w), "GET %s: %s", path, b)
		check(ct, w)
	}, 90*time.Second, 250*time.Millisecond)
	return w
}

// running checks that a workload is Running with ready replicas ready.
func running(ready int32) func(*assert.CollectT, computeapi.Workload) {
	return func(ct *assert.CollectT, w computeapi.Workload) {
		assert.Equal(ct, api.PhaseRunning, w.Status.Phase, "phase")
		assert.Equal(ct, ready, w.Status.Ready, "ready replicas")
	}
}

func TestGatewayWorkloadAPI(t *testing.T) {
	e2e.Need(t)
	const project = "gw-api"
	dev := reg.Token("gw-dev", false, map[string]string{project: "developer"})
	base := "/v1/projects/" + project + "/workloads"

	// Create, conflict, idempotent create.
	var created computeapi.Workload
	_ = json.Unmarshal(mustStatus(t, 201, "POST", base, dev, gwApp("web", 3, map[string]string{"tier": "front"})), &created)
	if created.Metadata.Uid == "" || created.Metadata.Project != project || created.Metadata.Generation != 1 {
		t.Fatalf("created: %+v", created.Metadata)
	}
	if !strings.Contains(string(mustStatus(t, 409, "POST", base, dev, gwApp("web", 3, nil))), "AlreadyExists") {
		t.Fatal("a second create of web is not AlreadyExists")
	}
	var first, again computeapi.Workload
	_ = json.Unmarshal(mustStatus(t, 201, "POST", base, dev, gwApp("idem", 1, nil), "Idempotency-Key", "k-1"), &first)
	code, b, hdr := call(t, "POST", base, dev, gwApp("idem", 1, nil), "Idempotency-Key", "k-1")
	if code != 201 || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retried create with the same key: %d %s %v", code, b, hdr)
	}
	_ = json.Unmarshal(b, &again)
	if again.Metadata.Uid != first.Metadata.Uid {
		t.Fatalf("retried create returned uid %s, first %s", again.Metadata.Uid, first.Metadata.Uid)
	}
	mustStatus(t, 422, "POST", base, dev, gwApp("idem", 2, nil), "Idempotency-Key", "k-1")

	// Bad input: field errors, unknown fields, a foreign project, a huge body.
	var e computeapi.Error
	_ = json.Unmarshal(mustStatus(t, 422, "POST", base, dev, []byte(`{"kind":"App","metadata":{"name":"Bad_Name"},"spec":{"replicas":-1,"template":{"containers":[]}}}`)), &e)
	if e.Code != "Invalid" || len(e.Fields) < 2 {
		t.Fatalf("bad document: %+v", e)
	}
	mustStatus(t, 400, "POST", base, dev, []byte(`{"kind":"App","metadata":{"name":"x"},"spec":{"replicas":1,"bogus":true}}`))
	mustStatus(t, 400, "POST", base, dev, []byte(`{"kind":"App","metadata":{"name":"x","project":"other"},"spec":{}}`))
	mustStatus(t, 413, "POST", base, dev, bytes.Repeat([]byte(" "), 2<<20))

	// Get, Running with per-zone counts; size against the raw objects.
	w := waitPhase(t, dev, base+"/app/web", api.PhaseRunning)
	if w.Status.Ready != 3 || len(w.Status.Zones) != 3 {
		t.Fatalf("status: ready %d zones %v", w.Status.Ready, w.Status.Zones)
	}
	_, view, _ := call(t, "GET", base+"/app/web", dev, nil)
	raw := rawObjectsSize(t, project, "web")
	t.Logf("response %d bytes; the member clusters' Deployments and Pods it stands for: %d bytes (%.1f%%)", len(view), raw, 100*float64(len(view))/float64(raw))
	if bytes.Contains(view, []byte("managedFields")) || len(view) >= raw {
		t.Fatalf("the view is not simpler than the raw objects: %d vs %d bytes", len(view), raw)
	}

	// List: filters and pages.
	for i := range 4 {
		mustStatus(t, 201, "POST", base, dev, gwApp(fmt.Sprintf("page-%d", i), 1, map[string]string{"tier": "batch"}))
	}
	var page computeapi.WorkloadList
	_ = json.Unmarshal(mustStatus(t, 200, "GET", base+"?label=tier%3Dbatch&limit=3", dev, nil), &page)
	if len(page.Items) != 3 || page.Continue == "" {
		t.Fatalf("first page: %d items, continue %q", len(page.Items), page.Continue)
	}
	var rest computeapi.WorkloadList
	_ = json.Unmarshal(mustStatus(t, 200, "GET", base+"?label=tier%3Dbatch&limit=3&continue="+page.Continue, dev, nil), &rest)
	if len(rest.Items) != 1 || rest.Continue != "" || rest.Items[0].Metadata.Name != "page-3" {
		t.Fatalf("second page: %+v", rest)
	}
	var all computeapi.WorkloadList
	_ = json.Unmarshal(mustStatus(t, 200, "GET", base+"?kind=app&phase=Running&label=tier%3Dfront", dev, nil), &all)
	if len(all.Items) != 1 || all.Items[0].Metadata.Name != "web" {
		t.Fatalf("kind/phase/label filter: %d items", len(all.Items))
	}
	mustStatus(t, 400, "GET", base+"?kind=Nope", dev, nil)
	mustStatus(t, 400, "GET", base+"?continue=bm90LWEta2V5", dev, nil)

	// Update, scale, delete.
	var up computeapi.Workload
	_ = json.Unmarshal(mustStatus(t, 200, "PUT", base+"/app/web", dev, gwApp("web", 4, map[string]string{"tier": "front"})), &up)
	if up.Metadata.Generation != 2 {
		t.Fatalf("update: generation %d", up.Metadata.Generation)
	}
	mustStatus(t, 400, "PUT", base+"/app/web", dev, gwApp("other", 4, nil))
	var sc computeapi.Workload
	_ = json.Unmarshal(mustStatus(t, 200, "POST", base+"/app/web/scale", dev, []byte(`{"replicas":2}`)), &sc)
	if !bytes.Contains(sc.Spec, []byte(`"replicas":2`)) {
		t.Fatalf("scale: spec %s", sc.Spec)
	}
	waitWorkload(t, dev, base+"/app/web", running(2))
	for _, n := range []string{"web", "idem", "page-0", "page-1", "page-2", "page-3"} {
		mustStatus(t, 204, "DELETE", base+"/app/"+n, dev, nil)
	}
	mustStatus(t, 404, "GET", base+"/app/web", dev, nil)
	mustStatus(t, 404, "DELETE", base+"/app/web", dev, nil)

	// Docs and contract.
	if b := mustStatus(t, 200, "GET", "/openapi.yaml", "", nil); !bytes.Contains(b, []byte("openapi: 3")) {
		t.Fatal("no contract at /openapi.yaml")
	}
	if b := mustStatus(t, 200, "GET", "/docs", "", nil); !bytes.Contains(b, []byte("createWorkload")) {
		t.Fatal("docs do not list createWorkload")
	}
}

// rawObjectsSize is the JSON size of the native objects a workload stands
// for, as the member clusters return them: Deployments and Pods.
func rawObjectsSize(t *testing.T, project, name string) int {
	t.Helper()
	total := 0
	sel := metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name}
	for _, c := range reg.Env.Clusters {
		cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cs := kubernetes.NewForConfigOrDie(cfg)
		deps, err := cs.AppsV1().Deployments(api.Namespace(project)).List(context.Background(), sel)
		if err != nil {
			t.Fatal(err)
		}
		pods, err := cs.CoreV1().Pods(api.Namespace(project)).List(context.Background(), sel)
		if err != nil {
			t.Fatal(err)
		}
		for i := range deps.Items {
			b, _ := json.Marshal(&deps.Items[i])
			total += len(b)
		}
		for i := range pods.Items {
			b, _ := json.Marshal(&pods.Items[i])
			total += len(b)
		}
	}
	return total
}

func TestGatewayAuthorizationMatrix(t *testing.T) {
	e2e.Need(t)
	const own, other = "authz-own", "authz-other"
	admin := reg.AdminToken
	for _, p := range []string{own, other} {
		mustStatus(t, 201, "POST", "/v1/projects/"+p+"/workloads", admin, gwApp("target", 1, nil))
	}
	audit, err := reg.Bus.NC.SubscribeSync("atoll.audit.>")
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Unsubscribe()

	type verb struct {
		name   string
		method string
		path   func(project, role string) string
		body   func(role string) []byte
		// need is the weakest role allowed; "platform" for platform admins only.
		need string
		// ok is the success status; objectScoped verbs answer 404 in another project.
		ok           int
		objectScoped bool
	}
	wl := func(p string) string { return "/v1/projects/" + p + "/workloads" }
	verbs := []verb{
		{"get", "GET", func(p, _ string) string { return wl(p) + "/app/target" }, nil, "viewer", 200, true},
		{"list", "GET", func(p, _ string) string { return wl(p) }, nil, "viewer", 200, false},
		{"events", "GET", func(p, _ string) string { return wl(p) + "/app/target/events" }, nil, "viewer", 200, true},
		{"create", "POST", func(p, _ string) string { return wl(p) }, func(role string) []byte { return gwApp("by-"+role, 1, nil) }, "developer", 201, false},
		{"update", "PUT", func(p, _ string) string { return wl(p) + "/app/target" }, func(string) []byte { return gwApp("target", 1, nil) }, "developer", 200, true},
		{"scale", "POST", func(p, _ string) string { return wl(p) + "/app/target/scale" }, func(string) []byte { return []byte(`{"replicas":1}`) }, "developer", 200, true},
		{"delete", "DELETE", func(p, role string) string { return wl(p) + "/app/by-" + role }, nil, "developer", 204, true},
		{"quota", "GET", func(p, _ string) string { return "/v1/projects/" + p + "/quota" }, nil, "viewer", 200, false},
		{"set-quota", "PUT", func(p, _ string) string { return "/v1/projects/" + p + "/quota/OnDemand" }, func(string) []byte { return []byte(`{"pods":1000}`) }, "platform", 200, false},
		{"clusters", "GET", func(string, string) string { return "/v1/clusters" }, nil, "platform", 200, false},
	}
	rank := map[string]int{"viewer": 1, "developer": 2, "admin": 3, "platform": 4}
	roles := []string{"none", "bad", "viewer", "developer", "admin", "platform"}
	for _, role := range roles {
		token := ""
		switch role {
		case "bad":
			token = "atl_not-a-token"
		case "platform":
			token = admin
		case "viewer", "developer", "admin":
			token = reg.Token("matrix-"+role, false, map[string]string{own: role})
		}
		for _, v := range verbs {
			for _, target := range []string{own, other} {
				var body []byte
				if v.body != nil {
					body = v.body(role)
				}
				want := v.ok
				switch {
				case role == "none" || role == "bad":
					want = 401
				case role == "platform":
				case v.need == "platform":
					want = 403
				case target == other && v.objectScoped:
					want = 404
				case target == other:
					want = 403
				case rank[role] < rank[v.need]:
					want = 403
				}
				if v.name == "create" && want == 201 && target == other && role != "platform" {
					want = 403
				}
				got, b, _ := call(t, v.method, v.path(target, role), token, body)
				if got != want {
					t.Errorf("%-9s %-9s in %-11s: %d, want %d: %s", role, v.name, target, got, want, b)
				}
			}
		}
	}
	// Every mutating call was audited, with who, what and the outcome.
	seen := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		m, err := audit.NextMsg(time.Second)
		if err != nil {
			break
		}
		var rec struct {
			Subject, Project, Verb, Outcome string
			Status                          int
		}
		_ = json.Unmarshal(m.Data, &rec)
		if !strings.HasSuffix(m.Subject, "."+rec.Project+"."+rec.Verb) {
			t.Errorf("audit record on %s names %s/%s", m.Subject, rec.Project, rec.Verb)
		}
		seen[fmt.Sprintf("%s %s %s %s %d", rec.Subject, rec.Project, rec.Verb, rec.Outcome, rec.Status)] = true
	}
	for _, want := range []string{
		"matrix-developer authz-own create success 201",
		"matrix-viewer authz-own delete denied 403",
		"matrix-developer authz-other update denied 404",
		" authz-own create denied 401",
		"admin authz-other set-quota success 200",
	} {
		if !seen[want] {
			t.Errorf("no audit record %q", want)
		}
	}
	for _, p := range []string{own, other} {
		for _, n := range []string{"target", "by-platform"} {
			call(t, "DELETE", wl(p)+"/app/"+n, admin, nil)
		}
	}
}

// sseEvents reads Server-Sent Events until n are read or the stream ends.
func sseEvents(t *testing.T, ctx context.Context, path, token, lastID string, n int) []computeapi.Event {
	t.Helper()
	return sseUntil(t, ctx, path, token, lastID, func(got []computeapi.Event) bool { return len(got) >= n })
}

// sseUntil reads Server-Sent Events until done says so or the stream ends.
func sseUntil(t *testing.T, ctx context.Context, path, token, lastID string, done func([]computeapi.Event) bool) []computeapi.Event {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", reg.GatewayURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("watch: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []computeapi.Event
	sc := bufio.NewScanner(resp.Body)
	var id string
	for !done(out) && sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			var e computeapi.Event
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e); err != nil {
				t.Fatal(err)
			}
			if strconv.FormatInt(e.Id, 10) != id {
				t.Fatalf("event id %d, SSE id %s", e.Id, id)
			}
			out = append(out, e)
		}
	}
	return out
}

func TestGatewayWatchResumes(t *testing.T) {
	e2e.Need(t)
	const project = "gw-watch"
	dev := reg.Token("gw-watcher", false, map[string]string{project: "developer"})
	base := "/v1/projects/" + project + "/workloads"
	mustStatus(t, 201, "POST", base, dev, gwApp("w", 2, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Read the first two events, then drop the connection.
	head := sseEvents(t, ctx, base+"/app/w/events", dev, "", 2)
	// More events happen while no one watches: a scale and a rollout.
	mustStatus(t, 200, "POST", base+"/app/w/scale", dev, []byte(`{"replicas":3}`))
	waitWorkload(t, dev, base+"/app/w", running(3))
	var list computeapi.EventList
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		list = computeapi.EventList{}
		_ = json.Unmarshal(mustStatus(ct, 200, "GET", base+"/app/w/events", dev, nil), &list)
		assert.GreaterOrEqual(ct, len(list.Items), 5, "events retained: %+v", list.Items)
	}, 30*time.Second, 250*time.Millisecond)
	// Resume from the last id seen: exactly the rest, in order.
	tail := sseEvents(t, ctx, base+"/app/w/events", dev, strconv.FormatInt(head[len(head)-1].Id, 10), len(list.Items)-len(head))
	got := append(head, tail...)
	var gotIDs, wantIDs []int64
	for i := range got {
		gotIDs = append(gotIDs, got[i].Id)
	}
	for _, e := range list.Items {
		wantIDs = append(wantIDs, e.Id)
	}
	if fmt.Sprint(gotIDs) != fmt.Sprint(wantIDs) {
		t.Fatalf("watched with a resume %v, the stream holds %v", gotIDs, wantIDs)
	}
	if head[0].Event != api.EventAdmitted {
		t.Fatalf("first event %s", head[0].Event)
	}
	// A resume after the last event listed waits for new ones, up to the
	// delete: each later than the resume point, in order, none twice.
	var after []computeapi.Event
	last := wantIDs[len(wantIDs)-1]
	opened, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		var once sync.Once
		after = sseUntil(t, ctx, base+"/app/w/events", dev, strconv.FormatInt(last, 10), func(got []computeapi.Event) bool {
			once.Do(func() { close(opened) }) // first asked once the watch has answered: the server is watching
			return len(got) > 0 && got[len(got)-1].Event == api.EventDeleted
		})
	}()
	select {
	case <-opened:
	case <-finished:
	}
	mustStatus(t, 204, "DELETE", base+"/app/w", dev, nil)
	<-finished
	if len(after) == 0 || after[len(after)-1].Event != api.EventDeleted {
		t.Fatalf("after the resume point, no delete: %+v", after)
	}
	for _, e := range after {
		if e.Id <= last {
			t.Fatalf("after the resume point %d, event %d again (%+v)", wantIDs[len(wantIDs)-1], e.Id, after)
		}
		last = e.Id
	}
}

func TestGatewayOperations(t *testing.T) {
	e2e.Need(t)
	const project = "gw-ops"
	dev := reg.Token("gw-operator", false, map[string]string{project: "developer"})
	base := "/v1/projects/" + project + "/workloads"
	mustStatus(t, 201, "POST", base, dev, gwApp("svc", 2, nil))
	waitPhase(t, dev, base+"/app/svc", api.PhaseRunning)

	var w computeapi.Workload
	_ = json.Unmarshal(mustStatus(t, 200, "POST", base+"/app/svc/pause", dev, nil), &w)
	if !w.Control.Paused {
		t.Fatalf("pause: control %+v", w.Control)
	}
	waitPhase(t, dev, base+"/app/svc", api.PhasePaused)
	mustStatus(t, 200, "POST", base+"/app/svc/resume", dev, nil)
	waitPhase(t, dev, base+"/app/svc", api.PhaseRunning)

	_ = json.Unmarshal(mustStatus(t, 200, "POST", base+"/app/svc/restart", dev, nil), &w)
	if w.Control.RestartedAt.IsZero() {
		t.Fatal("restart: no restartedAt")
	}
	_ = json.Unmarshal(mustStatus(t, 200, "POST", base+"/app/svc/containers/web/restart", dev, nil), &w)
	if _, ok := w.Control.ContainerRestarts["web"]; !ok {
		t.Fatalf("restart-container: %+v", w.Control)
	}
	mustStatus(t, 400, "POST", base+"/app/svc/containers/nope/restart", dev, nil)
	mustStatus(t, 400, "POST", base+"/app/svc/explode", dev, nil)

	// Stop releases the quota; start takes it again.
	_ = json.Unmarshal(mustStatus(t, 200, "POST", base+"/app/svc/stop", dev, nil), &w)
	waitPhase(t, dev, base+"/app/svc", api.PhaseStopped)
	var q computeapi.Quota
	_ = json.Unmarshal(mustStatus(t, 200, "GET", "/v1/projects/"+project+"/quota", dev, nil), &q)
	for _, tq := range q.Tiers {
		if tq.Used.Pods != 0 {
			t.Fatalf("stopped, yet %s uses %d pods", tq.Tier, tq.Used.Pods)
		}
	}
	// A quota too small for the workload refuses its start, naming the limit.
	_ = json.Unmarshal(mustStatus(t, 200, "PUT", "/v1/projects/"+project+"/quota/OnDemand", reg.AdminToken, []byte(`{"pods":1}`)), &q)
	var e computeapi.Error
	_ = json.Unmarshal(mustStatus(t, 409, "POST", base+"/app/svc/start", dev, nil), &e)
	if e.Code != "QuotaExceeded" || e.Quota == nil || e.Quota.Resource != "pods" || e.Quota.Limit != 1 {
		t.Fatalf("start over quota: %+v", e)
	}
	mustStatus(t, 200, "PUT", "/v1/projects/"+project+"/quota/OnDemand", reg.AdminToken, []byte(`{"pods":10}`))
	mustStatus(t, 200, "POST", base+"/app/svc/start", dev, nil)
	waitPhase(t, dev, base+"/app/svc", api.PhaseRunning)
	q = computeapi.Quota{}
	_ = json.Unmarshal(mustStatus(t, 200, "GET", "/v1/projects/"+project+"/quota", dev, nil), &q)
	for _, tq := range q.Tiers {
		if tq.Tier == "OnDemand" && (tq.Used.Pods != 2 || tq.Limit.Pods != 10 || tq.Default) {
			t.Fatalf("OnDemand quota after start: %+v", tq)
		}
	}
	mustStatus(t, 204, "DELETE", base+"/app/svc", dev, nil)
}

func TestGatewayClusters(t *testing.T) {
	e2e.Need(t)
	admin := reg.AdminToken
	var list computeapi.ClusterList
	_ = json.Unmarshal(mustStatus(t, 200, "GET", "/v1/clusters", admin, nil), &list)
	if len(list.Items) != len(reg.Members) {
		t.Fatalf("%d clusters listed, region has %d", len(list.Items), len(reg.Members))
	}
	name := list.Items[0].Name
	var c computeapi.Cluster
	_ = json.Unmarshal(mustStatus(t, 200, "GET", "/v1/clusters/"+name, admin, nil), &c)
	if !c.Healthy || c.Pools["general"].Nodes == 0 || c.Pools["general"].Allocatable.MilliCPU == 0 {
		t.Fatalf("cluster %s: %+v", name, c)
	}
	mustStatus(t, 404, "GET", "/v1/clusters/nowhere", admin, nil)
	_ = json.Unmarshal(mustStatus(t, 200, "POST", "/v1/clusters/"+name+"/cordon", admin, nil), &c)
	if !c.Cordoned {
		t.Fatal("cordon did not cordon")
	}
	_ = json.Unmarshal(mustStatus(t, 200, "POST", "/v1/clusters/"+name+"/uncordon", admin, nil), &c)
	if c.Cordoned {
		t.Fatal("uncordon did not uncordon")
	}
	_ = json.Unmarshal(mustStatus(t, 200, "PATCH", "/v1/clusters/"+name+"/labels", admin, []byte(`{"set":{"gw-test":"yes"}}`)), &c)
	if c.Labels["gw-test"] != "yes" {
		t.Fatalf("labels after set: %v", c.Labels)
	}
	c = computeapi.Cluster{}
	_ = json.Unmarshal(mustStatus(t, 200, "PATCH", "/v1/clusters/"+name+"/labels", admin, []byte(`{"remove":["gw-test"]}`)), &c)
	if _, ok := c.Labels["gw-test"]; ok {
		t.Fatalf("labels after remove: %v", c.Labels)
	}
	mustStatus(t, 400, "PATCH", "/v1/clusters/"+name+"/labels", admin, []byte(`{"set":{"bad key!":"x"}}`))
	dev := reg.Token("not-admin", false, map[string]string{"x": "admin"})
	mustStatus(t, 403, "POST", "/v1/clusters/"+name+"/cordon", dev, nil)
}
