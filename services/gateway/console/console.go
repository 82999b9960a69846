// Package console serves Atoll's web console: a single page written in plain
// HTML, CSS and JavaScript modules that talks to the Compute API under /v1
// of the same origin with the user's bearer token. Its third-party
// components, the shell's terminal (xterm.js) and the workload editor
// (CodeMirror), come from npm: `make console-assets` puts them in
// static/vendor (git-ignored), so `go build` never needs npm; without them
// the shell and the editor say their assets are missing.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

//go:embed static
var static embed.FS

// contentTypes are the types of the console's files, set here rather than
// left to the system's MIME tables: browsers refuse a module script served
// with anything but a JavaScript type.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".mjs":  "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".json": "application/json",
	".yaml": "text/yaml; charset=utf-8",
}

// securityPolicy lets the page load only its own files and talk only to its
// own origin. Inline styles are allowed (never inline scripts): the
// terminal (xterm.js) lays its rows out with <style> elements it writes.
const securityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// file is one embedded file, read once.
type file struct {
	body        []byte
	contentType string
	etag        string
}

var (
	loadOnce sync.Once
	files    map[string]file
	loadErr  error
)

// load reads every embedded file and computes its type and entity tag.
func load() (map[string]file, error) {
	loadOnce.Do(func() {
		sub, err := fs.Sub(static, "static")
		if err != nil {
			loadErr = fmt.Errorf("console files: %w", err)
			return
		}
		files = map[string]file{}
		loadErr = fs.WalkDir(sub, ".", func(name string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			body, err := fs.ReadFile(sub, name)
			if err != nil {
				return fmt.Errorf("read console file %s: %w", name, err)
			}
			sum := sha256.Sum256(body)
			files[name] = file{body: body, contentType: contentType(name), etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
			return nil
		})
	})
	return files, loadErr
}

func contentType(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := contentTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}

// Handler serves the console's files: index.html for "/", the others by
// name, each with its content type, an entity tag and Cache-Control:
// no-cache, so a browser revalidates and picks up a new gateway's console at
// once. Mount it under a prefix with http.StripPrefix; the page refers to
// its files relatively and to the API as /v1.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fsys, err := load()
		if err != nil {
			http.Error(w, "console unavailable", http.StatusInternalServerError)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name == "" {
			name = "index.html"
		}
		f, ok := fsys[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", f.contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if strings.HasSuffix(name, ".html") {
			h.Set("Content-Security-Policy", securityPolicy)
			h.Set("X-Frame-Options", "DENY")
		}
		// ServeContent answers If-None-Match with 304 and handles Range.
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}
