package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"
)

// A browser cannot set headers on a WebSocket, so the console offers its
// bearer token as a WebSocket subprotocol, as Kubernetes' API server
// accepts it: "base64url.bearer.atoll.dev.<token, base64url without
// padding>", beside execSubprotocol, the one the gateway selects (a browser
// fails a connection whose offered subprotocols none was selected).
const (
	execSubprotocol      = "atoll.exec"
	bearerProtocolPrefix = "base64url.bearer.atoll.dev." //nolint:gosec // G101: a protocol name's prefix, the token follows it
)

// websocketBearer returns the Authorization value carried by a WebSocket
// upgrade's subprotocols, or "" when there is none.
func websocketBearer(r *http.Request) string {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return ""
	}
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			enc, ok := strings.CutPrefix(strings.TrimSpace(p), bearerProtocolPrefix)
			if !ok {
				continue
			}
			tok, err := base64.RawURLEncoding.DecodeString(enc)
			if err != nil || len(tok) == 0 {
				return ""
			}
			return "Bearer " + string(tok)
		}
	}
	return ""
}

// browserExec says whether an exec request comes from a browser, which
// cannot read the HTTP answer of a refused upgrade: it offers
// execSubprotocol.
func browserExec(r *http.Request) bool {
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if strings.TrimSpace(p) == execSubprotocol {
				return true
			}
		}
	}
	return false
}

// publicOrigin returns the origin ("scheme://host[:port]") of the
// gateway's public URL; "" for none.
func publicOrigin(public string) (string, error) {
	if public == "" {
		return "", nil
	}
	u, err := url.Parse(public)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("gateway public URL %q: want http(s)://host[:port]", public)
	}
	return u.Scheme + "://" + strings.ToLower(u.Host), nil
}

// sameOrigin says whether an exec WebSocket may be opened for r. A
// request without an Origin is not a browser's (the CLI, the SDK: they
// send their own credentials and no page can make them). A browser's
// Origin must be the gateway's own URL: origin (the configured public
// URL's) when set, else an Origin on the very host the request was sent
// to; a page of any other site is refused, whatever token it holds.
func sameOrigin(r *http.Request, origin string) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false
	}
	if origin != "" {
		return strings.EqualFold(u.Scheme+"://"+u.Host, origin)
	}
	return strings.EqualFold(u.Host, r.Host)
}

// acceptOptions are the exec WebSocket's: its subprotocol, and the
// library's own origin check (Origin's host is the request's) widened to
// the configured public URL's host, which sameOrigin has checked.
func acceptOptions(origin string) *websocket.AcceptOptions {
	o := &websocket.AcceptOptions{Subprotocols: []string{execSubprotocol}}
	if origin != "" {
		_, host, _ := strings.Cut(origin, "://")
		o.OriginPatterns = []string{host}
	}
	return o
}

// refusalRecorder holds an answer written for a browser's exec request,
// to be passed on over the WebSocket instead.
type refusalRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRefusalRecorder() *refusalRecorder { return &refusalRecorder{header: http.Header{}} }

func (rr *refusalRecorder) Header() http.Header { return rr.header }

func (rr *refusalRecorder) WriteHeader(status int) {
	if rr.status == 0 {
		rr.status = status
	}
}

func (rr *refusalRecorder) Write(p []byte) (int, error) {
	if rr.status == 0 {
		rr.status = http.StatusOK
	}
	return rr.body.Write(p)
}

// refuseOverWebSocket passes a refusal on to a browser: it accepts the
// WebSocket, sends the error document as one text message and closes with
// 4000 plus the HTTP status (4403 for 403), so the page can show the
// API's own words.
func refuseOverWebSocket(w http.ResponseWriter, r *http.Request, rr *refusalRecorder, origin string) {
	conn, err := websocket.Accept(w, r, acceptOptions(origin))
	if err != nil {
		return // Accept has answered
	}
	defer func() { _ = conn.CloseNow() }()
	status := rr.status
	if status < 400 || status > 599 {
		status = http.StatusInternalServerError
	}
	_ = conn.Write(r.Context(), websocket.MessageText, rr.body.Bytes())
	_ = conn.Close(websocket.StatusCode(4000+status), http.StatusText(status))
}

// platformSidecar says whether container is one of the platform's sidecars
// in the workload (rendered as the API answers it): a shell never opens in
// one, whatever the caller's role.
func platformSidecar(rendered []byte, container string) bool {
	if container == "" {
		return false // the first main container
	}
	var doc struct {
		Spec struct {
			Template struct {
				Sidecars []struct {
					Name string `json:"name"`
				} `json:"sidecars"`
			} `json:"template"`
		} `json:"spec"`
	}
	if json.Unmarshal(rendered, &doc) != nil {
		return false
	}
	for _, c := range doc.Spec.Template.Sidecars {
		if c.Name == container {
			return true
		}
	}
	return false
}

// initContainer says whether container is one of the workload's init
// containers (its own or the platform's) in the workload as the API
// answers it: they run before the main ones, and a shell never opens in
// one.
func initContainer(rendered []byte, container string) bool {
	if container == "" {
		return false
	}
	var doc struct {
		Spec struct {
			Template struct {
				InitContainers []struct {
					Name string `json:"name"`
				} `json:"initContainers"`
			} `json:"template"`
		} `json:"spec"`
	}
	if json.Unmarshal(rendered, &doc) != nil {
		return false
	}
	for _, c := range doc.Spec.Template.InitContainers {
		if c.Name == container {
			return true
		}
	}
	return false
}
