package console_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"atoll.dev/services/gateway/console"
)

// The npm-built assets (make console-assets) are served with the types a
// browser needs for module scripts; without them the console is whole but
// for the shell and the editor.
func TestHandlerServesBuiltAssets(t *testing.T) {
	if _, err := os.Stat("static/vendor/xterm.mjs"); err != nil {
		t.Skip("the console assets are not built (make console-assets)")
	}
	srv := httptest.NewServer(console.Handler())
	defer srv.Close()
	for path, want := range map[string]string{
		"/vendor/xterm.mjs":         "text/javascript; charset=utf-8",
		"/vendor/addon-fit.mjs":     "text/javascript; charset=utf-8",
		"/vendor/editor.mjs":        "text/javascript; charset=utf-8",
		"/vendor/xterm.css":         "text/css; charset=utf-8",
		"/vendor/examples/app.yaml": "text/yaml; charset=utf-8",
	} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != want {
			t.Errorf("%s: %d %q, want 200 %q", path, res.StatusCode, res.Header.Get("Content-Type"), want)
		}
	}
	res, err := http.Get(srv.URL + "/vendor/.stamp")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("the build's stamp is served: %d", res.StatusCode)
	}
}
