package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"atoll.dev/services/gateway/console"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(http.StripPrefix("/console", console.Handler()))
	defer srv.Close()

	tests := []struct {
		name, method, path string
		wantStatus         int
		wantType           string
		wantBody           string
	}{
		{"index at the root", http.MethodGet, "/console/", http.StatusOK, "text/html; charset=utf-8", `<script type="module" src="app.js">`},
		{"script as a module", http.MethodGet, "/console/app.js", http.StatusOK, "text/javascript; charset=utf-8", "function boot()"},
		{"style sheet", http.MethodGet, "/console/app.css", http.StatusOK, "text/css; charset=utf-8", ":root"},
		{"head", http.MethodHead, "/console/app.js", http.StatusOK, "text/javascript; charset=utf-8", ""},
		{"missing file", http.MethodGet, "/console/nope.js", http.StatusNotFound, "", ""},
		{"no escape from the root", http.MethodGet, "/console/../console.go", http.StatusNotFound, "", ""},
		{"writes refused", http.MethodPost, "/console/app.js", http.StatusMethodNotAllowed, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.wantStatus)
			}
			if tt.wantStatus != http.StatusOK {
				return
			}
			if got := res.Header.Get("Content-Type"); got != tt.wantType {
				t.Errorf("Content-Type %q, want %q", got, tt.wantType)
			}
			if got := res.Header.Get("Cache-Control"); got != "no-cache" {
				t.Errorf("Cache-Control %q, want no-cache", got)
			}
			if res.Header.Get("ETag") == "" {
				t.Error("no ETag")
			}
			if !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("body does not contain %q", tt.wantBody)
			}
		})
	}
}

// A browser revalidating with the entity tag it holds gets 304 and no body.
func TestHandlerRevalidates(t *testing.T) {
	srv := httptest.NewServer(console.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/app.js")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	etag := res.Header.Get("ETag")
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/app.js", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("If-None-Match", etag)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotModified {
		t.Errorf("status %d with If-None-Match %s, want 304", res.StatusCode, etag)
	}
}
