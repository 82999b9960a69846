package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// fakeGateway answers the few Compute API calls these tests make, as the
// contract says, and records what it was sent.
type fakeGateway struct {
	mu        sync.Mutex
	workloads []computeapi.Workload
	quota     computeapi.Quota
	posts     []string // kind/name of every create
	puts      []string // request bodies of quota puts
	auth      []string // Authorization headers
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeGateway) handler(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/whoami", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			writeJSON(w, 401, computeapi.Error{Code: "Unauthenticated", Message: "unknown token"})
			return
		}
		writeJSON(w, 200, computeapi.Identity{Subject: "alice", Roles: map[string]computeapi.IdentityRoles{"demo": computeapi.Developer}})
	})
	mux.HandleFunc("GET /v1/projects/{project}/workloads", func(w http.ResponseWriter, r *http.Request) {
		var items []computeapi.Workload
		for _, wl := range f.workloads {
			if k := r.URL.Query().Get("kind"); k == "" || strings.EqualFold(k, wl.Kind) {
				items = append(items, wl)
			}
		}
		writeJSON(w, 200, computeapi.WorkloadList{Items: items})
	})
	mux.HandleFunc("GET /v1/projects/{project}/workloads/{kind}/{name}", func(w http.ResponseWriter, r *http.Request) {
		for _, wl := range f.workloads {
			if strings.EqualFold(wl.Kind, r.PathValue("kind")) && wl.Metadata.Name == r.PathValue("name") {
				writeJSON(w, 200, wl)
				return
			}
		}
		writeJSON(w, 404, computeapi.Error{Code: "NotFound", Message: "no such workload"})
	})
	mux.HandleFunc("POST /v1/projects/{project}/workloads", func(w http.ResponseWriter, r *http.Request) {
		var d computeapi.WorkloadDocument
		if err := json.NewDecoder(r.Body).Decode(&d); err != nil {
			t.Errorf("create: %v", err)
		}
		f.mu.Lock()
		f.posts = append(f.posts, string(d.Kind)+"/"+d.Metadata.Name+"@"+r.PathValue("project"))
		f.mu.Unlock()
		if d.Metadata.Name == "bad" {
			writeJSON(w, 400, computeapi.Error{Code: "Invalid", Message: "workload is invalid", Fields: []computeapi.FieldError{
				{Field: "spec.replicas", Code: "Range", Reason: "must be 0 or more"},
				{Field: "spec.template.containers[0].image", Code: "Required", Reason: "is required"},
			}})
			return
		}
		writeJSON(w, 201, computeapi.Workload{Kind: string(d.Kind), Metadata: computeapi.Metadata{Project: r.PathValue("project"), Name: d.Metadata.Name, Generation: 1}})
	})
	mux.HandleFunc("DELETE /v1/projects/{project}/workloads/{kind}/{name}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 403, computeapi.Error{Code: "Forbidden", Message: "viewer may not delete workloads in project demo", RequestId: "req-1"})
	})
	mux.HandleFunc("GET /v1/projects/{project}/quota", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, f.quota)
	})
	mux.HandleFunc("PUT /v1/projects/{project}/quota/{tier}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.puts = append(f.puts, r.PathValue("tier")+" "+string(b))
		writeJSON(w, 200, f.quota)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
}

// cliEnv isolates a test from the user's config and environment.
func cliEnv(t *testing.T) (configPath string) {
	t.Helper()
	configPath = filepath.Join(t.TempDir(), "atoll", "config.yaml")
	t.Setenv(EnvConfig, configPath)
	for _, k := range []string{EnvServer, EnvToken, EnvProject, EnvCA} {
		t.Setenv(k, "")
	}
	return configPath
}

// runCLI runs the command tree in process.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := Root()
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func newFake(t *testing.T) (*fakeGateway, string) {
	f := &fakeGateway{}
	srv := httptest.NewServer(f.handler(t))
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func TestKindName(t *testing.T) {
	tests := []struct{ in, want, wantErr string }{
		{"App", "App", ""}, {"app", "App", ""}, {"apps", "App", ""}, {"JOBSET", "JobSet", ""},
		{"jobsets", "JobSet", ""}, {"pod", "Pod", ""}, {"deployment", "", "unknown kind"},
	}
	for _, tc := range tests {
		got, err := kindName(tc.in)
		if got != tc.want || (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("kindName(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestLoginWritesConfig(t *testing.T) {
	path := cliEnv(t)
	_, url := newFake(t)

	_, _, err := runCLI(t, "", "login", "--server", url, "--token", "bad", "--project", "demo")
	var e *sdk.Error
	if !errors.As(err, &e) || e.Status != 401 {
		t.Fatalf("login with a bad token: %v, want the 401", err)
	}
	var msg strings.Builder
	PrintError(&msg, err)
	if want := "error: check the token against " + url + ": Unauthenticated (401 Unauthorized): unknown token\n"; msg.String() != want {
		t.Errorf("PrintError:\n%q\nwant\n%q", msg.String(), want)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed login wrote the config: %v", err)
	}

	out, _, err := runCLI(t, "", "login", "--server", url, "--token", "good", "--project", "demo")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "as alice") || !strings.Contains(out, path) {
		t.Errorf("login said %q", out)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600", st.Mode().Perm())
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Config{Server: url, Token: "good", Project: "demo"}, cfg); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}

	// A later login changes only what it is given.
	if _, _, err := runCLI(t, "", "login", "--project", "other"); err != nil {
		t.Fatal(err)
	}
	if cfg, _ = LoadConfig(path); cfg.Project != "other" || cfg.Token != "good" || cfg.Server != url {
		t.Errorf("config after second login %+v", cfg)
	}
}

func TestTargetPrecedence(t *testing.T) {
	path := cliEnv(t)
	if err := SaveConfig(path, Config{Server: "http://file", Token: "file-token", Project: "file-project"}); err != nil {
		t.Fatal(err)
	}
	g := &globals{}
	got, err := g.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if want := (target{"http://file", "file-token", "file-project"}); got != want {
		t.Errorf("from file: %+v, want %+v", got, want)
	}
	t.Setenv(EnvProject, "env-project")
	t.Setenv(EnvToken, "env-token")
	g.project = "flag-project"
	got, _ = g.resolve()
	if want := (target{"http://file", "env-token", "flag-project"}); got != want {
		t.Errorf("flag > env > file: %+v, want %+v", got, want)
	}
	if err := os.WriteFile(path, []byte("server: x\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := g.resolve(); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("a config with an unknown field: %v", err)
	}
}

func TestNoServerOrProject(t *testing.T) {
	cliEnv(t)
	if _, _, err := runCLI(t, "", "get"); err == nil || !strings.Contains(err.Error(), "atoll login") {
		t.Errorf("without a server: %v", err)
	}
	_, url := newFake(t)
	if _, _, err := runCLI(t, "", "get", "--server", url); err == nil || !strings.Contains(err.Error(), "no project") {
		t.Errorf("without a project: %v", err)
	}
}

func TestGetFormats(t *testing.T) {
	cliEnv(t)
	f, url := newFake(t)
	f.workloads = []computeapi.Workload{
		{Kind: "App", Metadata: computeapi.Metadata{Project: "demo", Name: "web", Generation: 2},
			Status: computeapi.WorkloadStatus{Phase: "Running", Desired: 6, Ready: 6, Zones: map[string]computeapi.Counts{"a": {Desired: 3, Ready: 3}, "b": {Desired: 3, Ready: 3}}}},
		{Kind: "JobSet", Metadata: computeapi.Metadata{Project: "demo", Name: "render", Generation: 1}, Control: computeapi.Control{Paused: true}},
	}
	base := []string{"--server", url, "--token", "good", "-p", "demo"}

	out, _, err := runCLI(t, "", append([]string{"get"}, base...)...)
	if err != nil {
		t.Fatal(err)
	}
	// A table per kind (TestGetAllByKind), blank lines between them.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "KIND") ||
		!strings.Contains(lines[1], "web") || !strings.Contains(lines[1], "6/6") || !strings.Contains(lines[1], "a:3/3 b:3/3") ||
		lines[2] != "" || !strings.HasPrefix(lines[3], "KIND") || !strings.Contains(lines[4], "Pending (paused)") {
		t.Errorf("table:\n%s", out)
	}

	out, _, err = runCLI(t, "", append([]string{"get", "-o", "json"}, base...)...)
	if err != nil {
		t.Fatal(err)
	}
	var l computeapi.WorkloadList
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Items) != 2 || l.Items[1].Metadata.Name != "render" {
		t.Errorf("json: %v\n%s", err, out)
	}

	out, _, err = runCLI(t, "", append([]string{"get", "apps", "web", "-o", "yaml"}, base...)...)
	if err != nil {
		t.Fatal(err)
	}
	var w computeapi.Workload
	if err := yaml.Unmarshal([]byte(out), &w); err != nil || w.Metadata.Name != "web" || w.Status.Zones["b"].Ready != 3 {
		t.Errorf("yaml: %v\n%s", err, out)
	}

	if _, _, err := runCLI(t, "", append([]string{"get", "app", "nope"}, base...)...); !sdk.IsNotFound(err) {
		t.Errorf("missing workload: %v", err)
	}
	if f.auth[0] != "Bearer good" {
		t.Errorf("Authorization %q", f.auth[0])
	}
}

func TestApplyDocuments(t *testing.T) {
	cliEnv(t)
	f, url := newFake(t)
	in := `kind: App
metadata: {name: web}
spec: {replicas: 3}
---
# a JSON document, in its own project
{"kind": "JobSet", "metadata": {"name": "render", "project": "batch"}, "spec": {}}
---
kind: App
metadata: {name: bad}
spec: {replicas: -1}
---
kind: App
spec: {}
`
	out, errOut, err := runCLI(t, in, "apply", "-f", "-", "--server", url, "-p", "demo")
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 1 {
		t.Fatalf("err = %v, want exit 1 (two documents rejected)", err)
	}
	if diff := cmp.Diff([]string{"App/web@demo", "JobSet/render@batch", "App/bad@demo"}, f.posts); diff != "" {
		t.Errorf("creates (-want +got):\n%s", diff)
	}
	for _, want := range []string{"app/web created (project demo, generation 1)", "jobset/render created (project batch"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{
		"document 3 (app/bad) rejected: Invalid (400 Bad Request): workload is invalid",
		"  spec.replicas: must be 0 or more (Range)",
		"  spec.template.containers[0].image: is required (Required)",
		"document 4: document has no metadata.name",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestDeleteForbiddenMessage(t *testing.T) {
	cliEnv(t)
	_, url := newFake(t)
	_, _, err := runCLI(t, "", "delete", "app", "web", "--server", url, "-p", "demo")
	if !sdk.IsForbidden(err) {
		t.Fatalf("err = %v, want 403", err)
	}
	var b strings.Builder
	PrintError(&b, err)
	want := "error: Forbidden (403 Forbidden): viewer may not delete workloads in project demo\n  request id req-1\n"
	if b.String() != want {
		t.Errorf("PrintError:\n%q\nwant\n%q", b.String(), want)
	}
}

func TestQuotaSetKeepsOtherLimits(t *testing.T) {
	cliEnv(t)
	f, url := newFake(t)
	f.quota = computeapi.Quota{Project: "demo", Tiers: []computeapi.TierQuota{
		{Tier: "OnDemand", Limit: computeapi.Resources{MilliCPU: 10000, MemoryBytes: 1 << 30}, Used: computeapi.Resources{MilliCPU: 1500, Pods: 3}},
		{Tier: "Preemptible", Default: true, Limit: computeapi.Resources{MilliCPU: 4000, Gpus: 8}},
	}}
	out, _, err := runCLI(t, "", "quota", "--set", "ondemand", "--pods", "5", "--cpu", "12", "--server", url, "-p", "demo")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.puts) != 1 || !strings.HasPrefix(f.puts[0], "OnDemand ") {
		t.Fatalf("puts %q, want one of OnDemand", f.puts)
	}
	var got computeapi.QuotaLimit
	if err := json.Unmarshal([]byte(strings.TrimPrefix(f.puts[0], "OnDemand ")), &got); err != nil {
		t.Fatal(err)
	}
	// The tier has a limit of its own: its other amounts are kept.
	want := computeapi.QuotaLimit{MilliCPU: new(int64(12000)), MemoryBytes: new(int64(1 << 30)), Gpus: new(int64(0)), Pods: new(int64(5)), StorageBytes: new(int64(0))}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("limits sent (-want +got):\n%s", diff)
	}
	// A tier on the default: only the amount given is sent, 0 included.
	if _, _, err := runCLI(t, "", "quota", "--set", "preemptible", "--gpus", "0", "--server", url, "-p", "demo"); err != nil {
		t.Fatal(err)
	}
	if len(f.puts) != 2 || f.puts[1] != `Preemptible {"gpus":0}` {
		t.Errorf("puts %q, want Preemptible {\"gpus\":0}", f.puts)
	}
	if !strings.Contains(out, "OnDemand") || !strings.Contains(out, "1500m/10") || !strings.Contains(out, "0/1Gi") {
		t.Errorf("table:\n%s", out)
	}
	if _, _, err := runCLI(t, "", "quota", "--set", "gold", "--server", url, "-p", "demo"); err == nil || !strings.Contains(err.Error(), "Reserved, OnDemand, Preemptible") {
		t.Errorf("unknown tier: %v", err)
	}
	if _, _, err := runCLI(t, "", "quota", "--cpu", "lots", "--server", url, "-p", "demo"); err == nil || !strings.Contains(err.Error(), "need --set") {
		t.Errorf("--cpu without --set: %v", err)
	}
}

func TestArgumentErrors(t *testing.T) {
	cliEnv(t)
	_, url := newFake(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"exec", "app", "web", "ls"}, "KIND NAME -- COMMAND"},
		{[]string{"exec", "app", "--", "ls"}, "KIND NAME -- COMMAND"},
		{[]string{"scale", "app", "web"}, `"replicas" not set`},
		{[]string{"clusters", "--cordon"}, "need a cluster NAME"},
		{[]string{"clusters", "a", "--cordon", "--uncordon"}, "exclude each other"},
		{[]string{"clusters", "a", "--label", "novalue"}, "want key=value"},
		{[]string{"get", "-o", "xml"}, "want table, json or yaml"},
		{[]string{"get", "deployments"}, "unknown kind"},
		{[]string{"apply"}, "-f FILE is required"},
		{[]string{"delete", "app"}, "accepts 2 arg(s)"},
		{[]string{"logs", "app", "web", "--tail", "-1"}, "0 or more"},
		{[]string{"pause", "app"}, "accepts 2 arg(s)"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := runCLI(t, "", append(tc.args, "--server", url, "-p", "demo")...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestHelpHasExamples(t *testing.T) {
	for _, c := range Root().Commands() {
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if c.Short == "" || c.Example == "" {
			t.Errorf("%s: Short %q, Example %q", c.Name(), c.Short, c.Example)
		}
	}
}
