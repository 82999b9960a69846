package gateway_test

import (
	"crypto/tls"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/pki"
	"atoll.dev/services/gateway"
)

// The gateway serves HTTPS with HSTS from its certificate files, answers
// plain HTTP on that port with 400 only, and serves a renewed certificate
// without a restart; without a certificate it serves plain HTTP with no
// HSTS.
func TestGatewayTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("test ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(cn string) {
		t.Helper()
		c, err := ca.Issue(pki.Request{CommonName: cn, Hosts: []string{"127.0.0.1"}, Server: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Write(dir, "gateway"); err != nil {
			t.Fatal(err)
		}
	}
	issue("first")
	g := newTestGateway(t, gateway.Config{TLS: gateway.TLSConfig{CertFile: filepath.Join(dir, "gateway.crt"), KeyFile: filepath.Join(dir, "gateway.key")}})
	if !strings.HasPrefix(g.URL, "https://") {
		t.Fatalf("URL %s, want https", g.URL)
	}
	// A new connection per request, so each sees the certificate served now.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
	served := func() (string, *http.Response) {
		t.Helper()
		resp, err := client.Get(g.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].Subject.CommonName, resp
	}
	cn, resp := served()
	if cn != "first" || resp.StatusCode != http.StatusOK {
		t.Errorf("served %q with %d, want first and 200", cn, resp.StatusCode)
	}
	if got := resp.Header.Get("Strict-Transport-Security"); got != gateway.HSTSValue {
		t.Errorf("Strict-Transport-Security %q, want %q", got, gateway.HSTSValue)
	}

	plain, err := http.Get("http://" + strings.TrimPrefix(g.URL, "https://") + "/healthz")
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP answered %d, want 400", plain.StatusCode)
		}
	}

	issue("renewed")
	deadline := time.Now().Add(5 * time.Second)
	for cn, _ := served(); cn != "renewed"; cn, _ = served() {
		if time.Now().After(deadline) {
			t.Fatalf("still serving %q 5 s after the certificate was renewed", cn)
		}
		time.Sleep(100 * time.Millisecond)
	}

	h := newTestGateway(t, gateway.Config{})
	resp, err = http.Get(h.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !strings.HasPrefix(h.URL, "http://") || resp.Header.Get("Strict-Transport-Security") != "" {
		t.Errorf("a gateway without a certificate: URL %s, HSTS %q", h.URL, resp.Header.Get("Strict-Transport-Security"))
	}
}
