package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/computeapi"
)

// configGateway records the documents created and updated, and answers a
// create of an existing name with 409 AlreadyExists.
type configGateway struct {
	mu       sync.Mutex
	exists   map[string]bool
	requests []string // "POST {doc}" or "PUT kind/name {doc}"
}

func (f *configGateway) serve(t *testing.T) string {
	mux := http.NewServeMux()
	record := func(w http.ResponseWriter, r *http.Request, what string) computeapi.WorkloadDocument {
		b, _ := io.ReadAll(r.Body)
		var d computeapi.WorkloadDocument
		if err := json.Unmarshal(b, &d); err != nil {
			t.Errorf("%s: %v", what, err)
		}
		f.mu.Lock()
		f.requests = append(f.requests, what+" "+string(bytes.TrimSpace(b)))
		f.mu.Unlock()
		return d
	}
	mux.HandleFunc("POST /v1/projects/{project}/workloads", func(w http.ResponseWriter, r *http.Request) {
		d := record(w, r, "POST")
		if f.exists[d.Metadata.Name] {
			writeJSON(w, 409, computeapi.Error{Code: "AlreadyExists", Message: "exists with a different spec"})
			return
		}
		writeJSON(w, 201, computeapi.Workload{Kind: string(d.Kind), Metadata: computeapi.Metadata{Project: r.PathValue("project"), Name: d.Metadata.Name, Generation: 1}})
	})
	mux.HandleFunc("PUT /v1/projects/{project}/workloads/{kind}/{name}", func(w http.ResponseWriter, r *http.Request) {
		d := record(w, r, "PUT "+r.PathValue("kind")+"/"+r.PathValue("name"))
		writeJSON(w, 200, computeapi.Workload{Kind: string(d.Kind), Metadata: computeapi.Metadata{Project: r.PathValue("project"), Name: d.Metadata.Name, Generation: 2}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCreateConfigAndSecret: --from-literal and --from-file make the
// document (a Config's files in spec.files, a Secret's in spec.data; a
// file's key its name unless given); a key given twice, or none, is
// refused before any request; --overwrite replaces what exists.
func TestCreateConfigAndSecret(t *testing.T) {
	cliEnv(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "nginx.conf")
	pw := filepath.Join(dir, "pw.txt")
	for p, v := range map[string]string{conf: "listen 80;\n", pw: "s3cret\n"} {
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		exists  bool
		args    []string
		want    []string // requests sent
		wantErr string
	}{
		{name: "config", args: []string{"config", "web", "--from-literal", "LOG=info", "--from-file", conf, "-l", "app=web"},
			want: []string{`POST {"apiVersion":"atoll.dev/v1","kind":"Config","metadata":{"labels":{"app":"web"},"name":"web"},"spec":{"data":{"LOG":"info"},"files":{"nginx.conf":"listen 80;\n"}}}`}},
		{name: "config, file key given", args: []string{"config", "web", "--from-file", "site=" + conf},
			want: []string{`POST {"apiVersion":"atoll.dev/v1","kind":"Config","metadata":{"name":"web"},"spec":{"files":{"site":"listen 80;\n"}}}`}},
		{name: "secret", args: []string{"secret", "db", "--from-literal", "USER=web", "--from-file", "PASSWORD=" + pw},
			want: []string{`POST {"apiVersion":"atoll.dev/v1","kind":"Secret","metadata":{"name":"db"},"spec":{"data":{"PASSWORD":"s3cret\n","USER":"web"}}}`}},
		{name: "secret overwritten", exists: true, args: []string{"secret", "db", "--from-literal", "USER=web", "--overwrite"},
			want: []string{`POST {"apiVersion":"atoll.dev/v1","kind":"Secret","metadata":{"name":"db"},"spec":{"data":{"USER":"web"}}}`,
				`PUT Secret/db {"apiVersion":"atoll.dev/v1","kind":"Secret","metadata":{"name":"db"},"spec":{"data":{"USER":"web"}}}`}},
		{name: "exists, no overwrite", exists: true, args: []string{"secret", "db", "--from-literal", "USER=web"},
			want:    []string{`POST {"apiVersion":"atoll.dev/v1","kind":"Secret","metadata":{"name":"db"},"spec":{"data":{"USER":"web"}}}`},
			wantErr: "AlreadyExists"},
		{name: "key twice", args: []string{"config", "web", "--from-literal", "nginx.conf=x", "--from-file", conf}, wantErr: `key "nginx.conf" given twice`},
		{name: "no keys", args: []string{"secret", "db"}, wantErr: "no keys"},
		{name: "bad literal", args: []string{"secret", "db", "--from-literal", "novalue"}, wantErr: "want KEY=VALUE"},
		{name: "missing file", args: []string{"config", "web", "--from-file", filepath.Join(dir, "none")}, wantErr: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &configGateway{exists: map[string]bool{"db": tc.exists, "web": tc.exists}}
			url := f.serve(t)
			_, _, err := runCLI(t, "", append(append([]string{"create"}, tc.args...), "--server", url, "--token", "good", "-p", "demo")...)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, f.requests); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDescribeSecretShowsNoValues: describe of a Secret shows its keys,
// version, digest and who wrote it; of a Config, each key and its size.
func TestDescribeSecretShowsNoValues(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var b strings.Builder
	describeKind(&b, computeapi.Workload{Kind: kindSecret, Metadata: computeapi.Metadata{Name: "db"},
		Spec: json.RawMessage(`{"keys":["PASSWORD","USER"],"version":3,"digest":"9f86d081","updatedBy":"alice","updated":"2026-01-02T03:04:05Z"}`)}, at.Add(time.Hour))
	for _, want := range []string{"PASSWORD, USER", "Version:", "3", "9f86d081", "alice", "(60m ago)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe secret lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	describeKind(&b, computeapi.Workload{Kind: kindConfig, Metadata: computeapi.Metadata{Name: "web"},
		Spec: json.RawMessage(`{"data":{"LOG":"info"},"files":{"nginx.conf":"listen 80;\n"}}`)}, at)
	for _, want := range []string{"LOG", "variable", "4", "nginx.conf", "file", "11"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe config lacks %q:\n%s", want, b.String())
		}
	}
}
