package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"atoll.dev/services/gateway/console"
)

// The project page carries the quota panel: usage per tier and what
// Preemptible borrows, read from the project's quota; the workload page
// shows the queue a pending workload waits in.
func TestConsoleShowsQuotaAndQueue(t *testing.T) {
	srv := httptest.NewServer(console.Handler())
	defer srv.Close()
	get := func(path string) string {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for path, wants := range map[string][]string{
		"/index.html": {`id="quota-card"`, `id="quota"`, "<th>Borrowed</th>", `id="quota-note"`, `id="quota-storage"`, "0 forbids the resource"},
		"/app.js":     {"/projects/${enc(project)}/quota", "t.default", "storageBytes", "q.maxWorkloads", "t.borrowed", "t.reclaimable", "st.queue", "st.position", "st.preemptedBy", "st.queuedAt"},
	} {
		body := get(path)
		for _, w := range wants {
			if !strings.Contains(body, w) {
				t.Errorf("%s lacks %q", path, w)
			}
		}
	}
}
