package gateway_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// testGateway is a gateway on an embedded bus with no region services
// behind it: enough for everything the gateway answers by itself (auth,
// limits, reads from the cache, docs).
type testGateway struct {
	Bus   *bus.Bus
	GW    *gateway.Service
	URL   string
	Admin string
}

// newTestGateway starts a gateway; each prepare runs on it before Start.
func newTestGateway(t testing.TB, cfg gateway.Config, prepare ...func(*gateway.Service)) *testGateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: "gateway-test", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	a := cfg.Authenticator
	if a == nil {
		if a, err = auth.New(auth.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	admin, _ := a.Mint(auth.Identity{Subject: "admin", PlatformAdmin: true})
	cfg.Listen, cfg.Authenticator = "127.0.0.1:0", a
	gw, err := gateway.New(b, log, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range prepare {
		p(gw)
	}
	if err := gw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Stop(context.Background()) })
	return &testGateway{Bus: b, GW: gw, URL: gw.URL(), Admin: admin}
}

// do sends one request and reads its answer; t is a test or the
// *assert.CollectT of a poll.
func (g *testGateway) do(t require.TestingT, method, path, token string, body []byte) (*http.Response, []byte) {
	req, _ := http.NewRequest(method, g.URL+path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestUnauthenticated(t *testing.T) {
	g := newTestGateway(t, gateway.Config{})
	for _, tc := range []struct{ name, header string }{
		{"no header", ""},
		{"not bearer", "Basic YWRtaW46YWRtaW4="},
		{"unknown token", "Bearer atl_0000"},
		{"malformed JWT", "Bearer a.b.c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", g.URL+"/v1/whoami", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatalf("status %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
		})
	}
}

func TestRateLimitPerIdentity(t *testing.T) {
	g := newTestGateway(t, gateway.Config{RatePerSecond: 5, Burst: 10})
	other, _ := g.GW.Auth().Mint(auth.Identity{Subject: "other", Roles: map[string]auth.Role{"p": auth.RoleViewer}})
	limited := 0
	var retryAfter string
	for range 30 {
		resp, _ := g.do(t, "GET", "/v1/whoami", g.Admin, nil)
		if resp.StatusCode == http.StatusTooManyRequests {
			limited++
			retryAfter = resp.Header.Get("Retry-After")
		}
	}
	if limited < 15 {
		t.Fatalf("%d of 30 requests limited at 5/s with a burst of 10", limited)
	}
	if n, err := strconv.Atoi(retryAfter); err != nil || n < 1 {
		t.Fatalf("Retry-After %q", retryAfter)
	}
	// Another identity has its own bucket.
	if resp, _ := g.do(t, "GET", "/v1/whoami", other, nil); resp.StatusCode != 200 {
		t.Fatalf("another identity: %d", resp.StatusCode)
	}
}

func TestBodyCapAndStrictDecoding(t *testing.T) {
	g := newTestGateway(t, gateway.Config{MaxBodyBytes: 4096})
	tests := []struct {
		name, method, path string
		body               []byte
		want               int
	}{
		{"body over the cap", "POST", "/v1/projects/p/workloads", bytes.Repeat([]byte("a"), 5000), 413},
		{"unknown field in a document", "POST", "/v1/projects/p/workloads", []byte(`{"kind":"App","metadata":{"name":"x"},"spec":{"bogus":1}}`), 400},
		{"wrong type", "POST", "/v1/projects/p/workloads", []byte(`{"kind":"App","metadata":{"name":"x"},"spec":{"replicas":"three"}}`), 400},
		{"unknown kind", "POST", "/v1/projects/p/workloads", []byte(`{"kind":"Nope","metadata":{"name":"x"},"spec":{}}`), 400},
		{"empty body", "POST", "/v1/projects/p/workloads", nil, 400},
		{"unknown field in a quota", "PUT", "/v1/projects/p/quota/OnDemand", []byte(`{"pods":1,"cores":2}`), 400},
		{"unknown tier", "PUT", "/v1/projects/p/quota/Gold", []byte(`{"pods":1}`), 400},
		{"negative limit", "PUT", "/v1/projects/p/quota/OnDemand", []byte(`{"pods":-1}`), 400},
		{"bad limit parameter", "GET", "/v1/projects/p/workloads?limit=abc", nil, 400},
		{"bad label selector", "GET", "/v1/projects/p/workloads?label=novalue", nil, 400},
		{"unknown path", "GET", "/v1/nothing", nil, 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := g.do(t, tc.method, tc.path, g.Admin, tc.body)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, b)
			}
			if !strings.Contains(resp.Header.Get("Content-Type"), "json") || !bytes.Contains(b, []byte(`"code"`)) {
				t.Fatalf("error is not a JSON Error: %s", b)
			}
		})
	}
}

func TestDocsAndContract(t *testing.T) {
	g := newTestGateway(t, gateway.Config{})
	resp, b := g.do(t, "GET", "/docs", "", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("docs: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{"createWorkload", "/v1/projects/{project}/workloads/{kind}/{name}/logs", "WorkloadStatus", "Last-Event-ID"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("docs lack %q", want)
		}
	}
	if resp, b := g.do(t, "GET", "/openapi.json", "", nil); resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"operationId":"listWorkloads"`)) {
		t.Fatalf("openapi.json: %d", resp.StatusCode)
	}
}

func TestStreamsPerIdentityAreCapped(t *testing.T) {
	g := newTestGateway(t, gateway.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := g.Bus.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w","generation":1,"uid":"u1"},"spec":{"replicas":1,"template":{"containers":[{"name":"c","image":"i"}]}}}`
	if _, err := kv.Put(ctx, "p.app.w", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { _, ok, _ := g.GW.Cache().Get(ctx, "p.app.w"); return ok }, 5*time.Second, 20*time.Millisecond, "not cached")
	watch := func(t require.TestingT) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "GET", g.URL+"/v1/projects/p/workloads/app/w/events?watch=true", nil)
		req.Header.Set("Authorization", "Bearer "+g.Admin)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "watch")
		return resp
	}
	var open []*http.Response
	for range 20 {
		resp := watch(t)
		if resp.StatusCode != 200 {
			t.Fatalf("watch %d: %d", len(open)+1, resp.StatusCode)
		}
		open = append(open, resp)
	}
	resp := watch(t)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("watch 21: %d, want 429 with Retry-After", resp.StatusCode)
	}
	// Closing one frees its slot.
	open[0].Body.Close()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp := watch(c)
		defer resp.Body.Close()
		assert.Equal(c, http.StatusOK, resp.StatusCode, "watch after a close")
	}, 5*time.Second, 20*time.Millisecond)
	for _, r := range open[1:] {
		r.Body.Close()
	}
}

func TestAuditTrailResistsJunk(t *testing.T) {
	g := newTestGateway(t, gateway.Config{RatePerSecond: 5, Burst: 5})
	sub, err := g.Bus.NC.SubscribeSync("atoll.audit.>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// A verb that is not an operation is never a subject. These come first,
	// while the address's bucket is full, so they are not limited away.
	for _, path := range []string{"/v1/projects/p/workloads/app/x/delete-all", "/v1/clusters/c/a.b"} {
		if resp, _ := g.do(t, "POST", path, "", nil); resp.StatusCode == http.StatusTooManyRequests {
			t.Fatalf("POST %s limited; it must reach the audit", path)
		}
	}
	// Unauthenticated calls are limited per address before they are audited.
	limited := 0
	for range 20 {
		resp, _ := g.do(t, "POST", "/v1/projects/p/workloads/app/x/pause", "", nil)
		if resp.StatusCode == http.StatusTooManyRequests {
			limited++
		}
	}
	audited := map[string]int{}
	for {
		m, err := sub.NextMsg(500 * time.Millisecond)
		if err != nil {
			break
		}
		audited[m.Subject]++
	}
	if limited < 10 || audited["atoll.audit.p.pause"] > 10 {
		t.Fatalf("%d of 20 unauthenticated calls limited; audited %v", limited, audited)
	}
	for subj := range audited {
		if subj != "atoll.audit.p.pause" {
			t.Errorf("audited on %s", subj)
		}
	}
}
