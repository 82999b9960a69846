package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/computeapi"
)

// memGateway is a small in-memory gateway for the workload calls.
type memGateway struct {
	mu    sync.Mutex
	items map[string]computeapi.Workload // by project/kind/name
	calls []string
}

func (g *memGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, r.Method+" "+r.URL.Path)
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/projects/"), "/")
	project := parts[0]
	switch {
	case r.Method == http.MethodPost && len(parts) == 2:
		var d computeapi.WorkloadDocument
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			writeJSON(w, 400, computeapi.Error{Code: "Invalid", Message: "bad document",
				Fields: []computeapi.FieldError{{Field: "spec", Code: "Unknown", Reason: err.Error()}}})
			return
		}
		key := project + "/" + strings.ToLower(string(d.Kind)) + "/" + d.Metadata.Name
		if _, ok := g.items[key]; ok {
			apiError(w, 409, "AlreadyExists", key+" exists")
			return
		}
		wl := computeapi.Workload{Kind: string(d.Kind), Metadata: computeapi.Metadata{Project: project, Name: d.Metadata.Name, Generation: 1}, Spec: d.Spec}
		g.items[key] = wl
		writeJSON(w, 201, wl)
	case r.Method == http.MethodPut && len(parts) == 4:
		key := project + "/" + strings.ToLower(parts[2]) + "/" + parts[3]
		wl, ok := g.items[key]
		if !ok {
			apiError(w, 404, "NotFound", key)
			return
		}
		var d computeapi.WorkloadDocument
		_ = json.NewDecoder(r.Body).Decode(&d)
		wl.Spec = d.Spec
		wl.Metadata.Generation++
		g.items[key] = wl
		writeJSON(w, 200, wl)
	case r.Method == http.MethodGet && len(parts) == 2:
		// Pages of one item, the continue token being the index.
		if r.URL.Query().Has("limit") && r.URL.Query().Get("limit") != "1" {
			apiError(w, 400, "Invalid", "limit")
			return
		}
		var keys []string
		for k := range g.items {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		i := 0
		fmt.Sscan(r.URL.Query().Get("continue"), &i)
		l := computeapi.WorkloadList{Items: []computeapi.Workload{g.items[keys[i]]}}
		if i+1 < len(keys) {
			l.Continue = fmt.Sprint(i + 1)
		}
		writeJSON(w, 200, l)
	default:
		apiError(w, 404, "NotFound", r.URL.Path)
	}
}

func TestApplyCreatesThenUpdates(t *testing.T) {
	g := &memGateway{items: map[string]computeapi.Workload{}}
	c := newTestClient(t, g.ServeHTTP)
	ctx := context.Background()
	doc := []byte("kind: App\nmetadata:\n  name: web\nspec:\n  replicas: 3\n")
	w, created, err := c.Apply(ctx, "demo", doc)
	if err != nil || !created || w.Metadata.Generation != 1 {
		t.Fatalf("first apply: %v created=%v %+v", err, created, w)
	}
	w, created, err = c.Apply(ctx, "demo", []byte(`{"kind":"App","metadata":{"name":"web"},"spec":{"replicas":5}}`))
	if err != nil || created || w.Metadata.Generation != 2 || string(w.Spec) != `{"replicas":5}` {
		t.Fatalf("second apply: %v created=%v %+v", err, created, w)
	}
	want := []string{"POST /v1/projects/demo/workloads", "POST /v1/projects/demo/workloads", "PUT /v1/projects/demo/workloads/App/web"}
	if diff := cmp.Diff(want, g.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	// The document's own project wins; with none anywhere, nothing is sent.
	if _, _, err := c.Apply(ctx, "", []byte("kind: App\nmetadata: {name: api, project: other}\nspec: {}\n")); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.items["other/app/api"]; !ok {
		t.Errorf("not created in the document's project: %v", g.items)
	}
	if _, _, err := c.Apply(ctx, "", []byte("kind: App\nmetadata: {name: api}\nspec: {}\n")); err == nil || !strings.Contains(err.Error(), "no project") {
		t.Errorf("apply without project: %v", err)
	}
}

func TestApplyKeepsUnknownFieldsForTheGateway(t *testing.T) {
	g := &memGateway{items: map[string]computeapi.Workload{}}
	c := newTestClient(t, g.ServeHTTP)
	_, _, err := c.Apply(context.Background(), "demo", []byte("kind: App\nmetadata: {name: web}\nspec: {}\nbogus: 1\n"))
	var e *Error
	if !errors.As(err, &e) || e.Status != 400 || len(e.Body.Fields) != 1 {
		t.Fatalf("err = %v, want the gateway's 400 naming the field", err)
	}
	if !strings.Contains(err.Error(), "400 Invalid: bad document: spec:") {
		t.Errorf("message %q", err.Error())
	}
}

func TestPages(t *testing.T) {
	g := &memGateway{items: map[string]computeapi.Workload{}}
	for _, n := range []string{"a", "b", "c"} {
		g.items["demo/app/"+n] = computeapi.Workload{Kind: "App", Metadata: computeapi.Metadata{Project: "demo", Name: n}}
	}
	c := newTestClient(t, g.ServeHTTP)
	all, err := c.ListAll(context.Background(), "demo", computeapi.ListWorkloadsParams{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range all {
		names = append(names, w.Metadata.Name)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	// Stopping early sends no further request.
	g.calls = nil
	for range c.Pages(context.Background(), "demo", computeapi.ListWorkloadsParams{Limit: 1}) {
		break
	}
	if len(g.calls) != 1 {
		t.Errorf("%d requests for one page", len(g.calls))
	}
}

func TestUnsetParametersStayOffTheWire(t *testing.T) {
	var got []string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, hasKey := r.Header["Idempotency-Key"]
		_, hasLast := r.Header["Last-Event-Id"]
		got = append(got, fmt.Sprintf("%s?%s key=%v last=%v", r.URL.Path, r.URL.RawQuery, hasKey, hasLast))
		writeJSON(w, 200, computeapi.WorkloadList{})
	})
	ctx := context.Background()
	_, _ = c.List(ctx, "demo", computeapi.ListWorkloadsParams{})
	_, _ = c.List(ctx, "demo", computeapi.ListWorkloadsParams{Kind: "app", Label: "tier=web,team=x", Limit: 5})
	_, _ = c.ListEvents(ctx, "demo", "App", "web", 0)
	want := []string{
		"/v1/projects/demo/workloads? key=false last=false",
		"/v1/projects/demo/workloads?kind=app&label=tier%3Dweb%2Cteam%3Dx&limit=5 key=false last=false",
		"/v1/projects/demo/workloads/App/web/events? key=false last=false",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"fields", 400, `{"code":"Invalid","message":"workload is invalid","fields":[{"field":"spec.replicas","code":"Range","reason":"must be >= 0"},{"field":"metadata.name","code":"Required","reason":"is required"}]}`,
			"400 Invalid: workload is invalid: spec.replicas: must be >= 0 (Range); metadata.name: is required (Required)"},
		{"quota", 403, `{"code":"QuotaExceeded","message":"over quota","quota":{"project":"p","tier":"OnDemand","resource":"cpu","limit":1000,"used":900,"requested":200}}`,
			"403 QuotaExceeded: over quota"},
		{"not the contract's body", 502, "upstream connect error", "502 BadGateway: upstream connect error"},
		{"empty body", 503, "", "503 ServiceUnavailable: Service Unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := newError(tc.status, []byte(tc.body)).Error(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestParseDocument(t *testing.T) {
	tests := []struct {
		name, in string
		want     *Document
		wantErr  string
	}{
		{"yaml", "kind: App\nmetadata:\n  name: web\n  project: demo\nspec: {replicas: 2}\n",
			&Document{JSON: []byte(`{"kind":"App","metadata":{"name":"web","project":"demo"},"spec":{"replicas":2}}`), Kind: "App", Name: "web", Project: "demo"}, ""},
		{"json", `{"kind":"Pod","metadata":{"name":"nb"},"spec":{}}`,
			&Document{JSON: []byte(`{"kind":"Pod","metadata":{"name":"nb"},"spec":{}}`), Kind: "Pod", Name: "nb"}, ""},
		{"no name", "kind: App\nspec: {}\n", nil, "no metadata.name"},
		{"no kind nor name", "spec: {}\n", nil, "no kind and no metadata.name"},
		{"a list", "- a\n- b\n", nil, "want an object"},
		{"malformed", "kind: [\n", nil, "malformed document"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDocument([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestSplitDocuments(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"one", "a: 1\n", []string{"a: 1\n"}},
		{"two", "a: 1\n---\nb: 2\n", []string{"a: 1\n", "b: 2\n"}},
		{"leading separator, comments, CRLF", "---\r\n# only a comment\n--- # next\na: 1\n---   \n", []string{"a: 1\n"}},
		{"json", `{"kind":"App"}`, []string{`{"kind":"App"}` + "\n"}},
		{"none", "# nothing\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := SplitDocuments(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range docs {
				got = append(got, string(d))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	for _, s := range []string{"", "localhost:8080", "ftp://x", "http://"} {
		if _, err := New(s); err == nil {
			t.Errorf("New(%q): no error", s)
		}
	}
	if _, err := New("http://x", WithRetry(0, 0, 0)); err == nil {
		t.Error("WithRetry(0): no error")
	}
}
