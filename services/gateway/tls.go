package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"

	"atoll.dev/libs/pki"
)

// TLSConfig names the gateway's certificate. With both files the gateway
// serves HTTPS only (TLS 1.2 at least, HTTP/1.1), sends
// Strict-Transport-Security, and reads the files again when they change,
// so a renewed certificate is served without a restart. With neither it
// serves plain HTTP: for tests and development only, and the command
// refuses it unless --insecure-plain-http says so.
type TLSConfig struct {
	// CertFile is the PEM certificate chain (the server's first).
	CertFile string `json:"certFile"`
	// KeyFile is its PEM private key.
	KeyFile string `json:"keyFile"`
}

// Enabled reports whether a certificate is configured.
func (c TLSConfig) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// HSTSValue is the Strict-Transport-Security header of every HTTPS response:
// a year, so a browser that has seen the gateway never talks to it in
// clear again.
const HSTSValue = "max-age=31536000"

// serverTLS is the TLS configuration of the listener, nil without a
// certificate.
func (c TLSConfig) serverTLS() (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, errors.New("gateway tls: needs both a certificate and a key file")
	}
	r, err := pki.NewReloader(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("gateway tls: %w", err)
	}
	cfg := pki.ServerConfig(r)
	// HTTP/1.1 only: exec and the console's terminal are WebSocket
	// upgrades, which HTTP/2 does not carry for every client.
	cfg.NextProtos = []string{"http/1.1"}
	return cfg, nil
}

// listenTLS wraps ln in TLS when a certificate is configured.
func (s *Service) listenTLS(ln net.Listener) (net.Listener, error) {
	cfg, err := s.cfg.TLS.serverTLS()
	if err != nil || cfg == nil {
		return ln, err
	}
	return tls.NewListener(ln, cfg), nil
}

// hsts tells browsers to use HTTPS only, on responses sent over TLS.
func hsts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header().Set("Strict-Transport-Security", HSTSValue)
		}
		next.ServeHTTP(w, r)
	})
}
