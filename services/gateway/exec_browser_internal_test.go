package gateway

import (
	"encoding/base64"
	"net/http"
	"testing"
)

func TestWebsocketBearer(t *testing.T) {
	tok := base64.RawURLEncoding.EncodeToString([]byte("atl_secret/+="))
	tests := []struct {
		name      string
		upgrade   string
		protocols []string
		want      string
	}{
		{"token beside the exec protocol", "websocket", []string{"atoll.exec, " + bearerProtocolPrefix + tok}, "Bearer atl_secret/+="},
		{"in a header of its own", "WebSocket", []string{"atoll.exec", bearerProtocolPrefix + tok}, "Bearer atl_secret/+="},
		{"not an upgrade", "", []string{bearerProtocolPrefix + tok}, ""},
		{"no token", "websocket", []string{"atoll.exec"}, ""},
		{"not base64url", "websocket", []string{bearerProtocolPrefix + "%%%"}, ""},
		{"empty token", "websocket", []string{bearerProtocolPrefix}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodGet, "/v1/projects/p/workloads/app/web/exec", nil)
			if tt.upgrade != "" {
				r.Header.Set("Upgrade", tt.upgrade)
			}
			for _, p := range tt.protocols {
				r.Header.Add("Sec-WebSocket-Protocol", p)
			}
			if got := websocketBearer(r); got != tt.want {
				t.Errorf("websocketBearer = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPlatformSidecar(t *testing.T) {
	rendered := []byte(`{"kind":"App","spec":{"template":{"containers":[{"name":"web"}],"sidecars":[{"name":"atoll-log-shipper"}]}}}`)
	tests := []struct {
		container string
		want      bool
	}{
		{"atoll-log-shipper", true},
		{"web", false},
		{"", false},
		{"other", false},
	}
	for _, tt := range tests {
		t.Run(tt.container, func(t *testing.T) {
			if got := platformSidecar(rendered, tt.container); got != tt.want {
				t.Errorf("platformSidecar(%q) = %v, want %v", tt.container, got, tt.want)
			}
		})
	}
	if platformSidecar([]byte("not json"), "atoll-log-shipper") {
		t.Error("a document that does not parse names no sidecar")
	}
}

func TestSameOrigin(t *testing.T) {
	tests := []struct {
		name, public, host, origin string
		want                       bool
	}{
		{"no origin: not a browser", "", "gw:8443", "", true},
		{"same host", "", "gw:8443", "https://gw:8443", true},
		{"same host, other case", "", "GW:8443", "https://gw:8443", true},
		{"another site", "", "gw:8443", "https://evil.example", false},
		{"another port", "", "gw:8443", "https://gw:9443", false},
		{"not a URL", "", "gw:8443", "null", false},
		{"the public URL", "https://atoll.example.com", "10.0.0.7:8443", "https://atoll.example.com", true},
		{"the public host over plain HTTP", "https://atoll.example.com", "10.0.0.7:8443", "http://atoll.example.com", false},
		{"the request's host when a public URL is set", "https://atoll.example.com", "10.0.0.7:8443", "https://10.0.0.7:8443", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			origin, err := publicOrigin(tt.public)
			if err != nil {
				t.Fatal(err)
			}
			r, _ := http.NewRequest(http.MethodGet, "/v1/projects/p/workloads/app/web/exec", nil)
			r.Host = tt.host
			if tt.origin != "" {
				r.Header.Set("Origin", tt.origin)
			}
			if got := sameOrigin(r, origin); got != tt.want {
				t.Errorf("sameOrigin = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPublicOriginRefusesNonURLs(t *testing.T) {
	for _, bad := range []string{"atoll.example.com", "ftp://atoll.example.com", "https://"} {
		if _, err := publicOrigin(bad); err == nil {
			t.Errorf("publicOrigin(%q) accepted", bad)
		}
	}
}

func TestInitContainer(t *testing.T) {
	rendered := []byte(`{"kind":"App","spec":{"template":{"initContainers":[{"name":"setup"}],"containers":[{"name":"web"}],"sidecars":[{"name":"atoll-log-shipper"}]}}}`)
	tests := []struct {
		container string
		want      bool
	}{
		{"setup", true},
		{"web", false},
		{"atoll-log-shipper", false}, // platformSidecar's
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.container, func(t *testing.T) {
			if got := initContainer(rendered, tt.container); got != tt.want {
				t.Errorf("initContainer(%q) = %v, want %v", tt.container, got, tt.want)
			}
		})
	}
}
