package cli

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"atoll.dev/libs/computeapi"
)

// atoll logs --file asks the logs API for the file, with follow and tail,
// and prints its lines as it prints a container's; the API's refusal of a
// missing file is the command's error.
func TestLogsFile(t *testing.T) {
	cliEnv(t)
	var got url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/projects/demo/workloads/App/web/logs" {
			t.Errorf("path %s", r.URL.Path)
		}
		got = r.URL.Query()
		if got.Get("file") == "/var/log/missing.log" {
			writeJSON(w, 404, computeapi.Error{Code: "NotFound", Message: "no file /var/log/missing.log in web-1/web"})
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = w.Write([]byte(`{"cluster":"zone-a","pod":"web-1","container":"web","line":"from the file"}` + "\n"))
	}))
	defer srv.Close()

	out, _, err := runCLI(t, "", "logs", "app", "web", "--file", "/var/log/app.log", "-f", "--tail", "5", "--server", srv.URL, "-p", "demo")
	if err != nil {
		t.Fatal(err)
	}
	if got.Get("file") != "/var/log/app.log" || got.Get("follow") != "true" || got.Get("tail") != "5" {
		t.Errorf("query %v, want file, follow and tail", got)
	}
	if want := "[zone-a/web-1/web] from the file\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}

	_, _, err = runCLI(t, "", "logs", "app", "web", "--file", "/var/log/missing.log", "--server", srv.URL, "-p", "demo")
	if err == nil || !strings.Contains(err.Error(), "no file /var/log/missing.log") {
		t.Errorf("a missing file: %v", err)
	}
}
