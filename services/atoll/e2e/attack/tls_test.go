package attack

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/gateway"
)

// get sends GET path with the admin token through c to base.
func get(t *testing.T, c *http.Client, base, path string) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+reg.AdminToken)
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body), nil
}

// A plain-HTTP request to the gateway's port, a valid token in it, gets
// no API answer: Go's TLS server answers 400 to what is not a TLS
// handshake, or the connection fails.
func TestPlainHTTPToTheGatewayGetsNoAnswer(t *testing.T) {
	e2e.Need(t)
	if !strings.HasPrefix(reg.GatewayURL, "https://") {
		t.Fatalf("gateway URL %s, want https", reg.GatewayURL)
	}
	plain := "http://" + strings.TrimPrefix(reg.GatewayURL, "https://")
	for _, path := range []string{"/v1/whoami", "/healthz", "/v1/projects/demo/workloads"} {
		t.Run(path, func(t *testing.T) {
			resp, body, err := get(t, &http.Client{}, plain, path)
			if err != nil {
				return // refused: as good as the 400
			}
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("plain HTTP %s: status %d, want 400 or a connection error; body %q", path, resp.StatusCode, body)
			}
			if strings.Contains(body, "admin") || strings.Contains(body, "{") {
				t.Errorf("plain HTTP %s: an API answer came back: %q", path, body)
			}
		})
	}
}

// Over HTTPS the gateway answers, with HSTS, to a client that trusts the
// region's CA; a client that does not is refused by its own verification
// (no answer to skip a warning for), and TLS 1.1 is refused.
func TestHTTPSGateway(t *testing.T) {
	e2e.Need(t)
	resp, body, err := get(t, reg.HTTPClient(), reg.GatewayURL, "/v1/whoami")
	if err != nil {
		t.Fatalf("https whoami: %v", err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "admin") {
		t.Errorf("https whoami: %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Strict-Transport-Security"); got != gateway.HSTSValue {
		t.Errorf("Strict-Transport-Security %q, want %q", got, gateway.HSTSValue)
	}
	if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("connection state %+v, want TLS 1.2 or later", resp.TLS)
	}

	_, _, err = get(t, &http.Client{}, reg.GatewayURL, "/v1/whoami")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("a client without the region's CA: %v, want an unknown authority", err)
	}

	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: reg.CAPool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}}} //nolint:gosec // G402: the attacker's old TLS, which must be refused
	if _, _, err := get(t, old, reg.GatewayURL, "/healthz"); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
	for i, u := range reg.GatewayURLs() {
		if u != "" && !strings.HasPrefix(u, "https://") {
			t.Errorf("gateway replica %d at %s, want https", i, u)
		}
	}
}
