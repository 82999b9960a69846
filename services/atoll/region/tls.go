package region

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"atoll.dev/libs/pki"
	"atoll.dev/services/gateway"
)

// GatewayHosts are the names the region's gateway certificate is valid
// for (Options.TLS).
var GatewayHosts = []string{"localhost", "127.0.0.1", "::1", "gateway"}

// prepareTLS makes the region's CA in <Dir>/tls (kept across runs of the
// same directory, so a client that trusts it keeps trusting it) and a
// gateway certificate signed by it, and has the gateway serve HTTPS.
func (r *Region) prepareTLS(o Options, cfg *gateway.Config) error {
	dir := filepath.Join(o.Dir, "tls")
	ca, err := pki.LoadOrCreateCA(dir, "Atoll region CA")
	if err != nil {
		return fmt.Errorf("region tls: %w", err)
	}
	c, err := ca.Issue(pki.Request{CommonName: "atoll-gateway", Hosts: GatewayHosts, Server: true})
	if err != nil {
		return fmt.Errorf("region tls: %w", err)
	}
	certFile, keyFile, err := c.Write(dir, "gateway")
	if err != nil {
		return fmt.Errorf("region tls: %w", err)
	}
	cfg.TLS = gateway.TLSConfig{CertFile: certFile, KeyFile: keyFile}
	r.CAFile = filepath.Join(dir, pki.CACertFile)
	r.CAPool = ca.Pool()
	return nil
}

// scheme is the gateway's URL scheme: https with Options.TLS.
func (r *Region) scheme() string {
	if r.CAPool != nil {
		return "https://"
	}
	return "http://"
}

// hostPort strips the scheme off a gateway URL.
func hostPort(url string) string {
	return strings.TrimPrefix(strings.TrimPrefix(url, "https://"), "http://")
}

// gatewayTLSEnv is the environment that gives a gateway process the
// region's certificate, or lets it serve plain HTTP without one.
func (r *Region) gatewayTLSEnv() []string {
	if r.gatewayCfg.TLS.Enabled() {
		return []string{"ATOLL_GATEWAY_TLS_CERT=" + r.gatewayCfg.TLS.CertFile, "ATOLL_GATEWAY_TLS_KEY=" + r.gatewayCfg.TLS.KeyFile}
	}
	return []string{"ATOLL_GATEWAY_INSECURE_PLAIN_HTTP=true"}
}

// HTTPClient is an HTTP client for the region's gateway: it trusts the
// region's CA (Options.TLS) and nothing else, or is a plain client when
// the gateway serves plain HTTP.
func (r *Region) HTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if r.CAPool != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: r.CAPool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: t}
}
