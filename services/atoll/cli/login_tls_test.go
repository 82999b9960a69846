package cli

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// login --ca trusts a gateway whose certificate a private CA signed, keeps
// the CA in the config file, and later commands trust it without --ca;
// without it the gateway is refused, not skipped.
func TestLoginWithCA(t *testing.T) {
	path := cliEnv(t)
	f := &fakeGateway{}
	srv := httptest.NewTLSServer(f.handler(t))
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	_, _, err := runCLI(t, "", "login", "--server", srv.URL, "--token", "good", "--project", "demo")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("login without --ca: %v, want an unknown authority", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused login wrote the config: %v", err)
	}

	if _, _, err := runCLI(t, "", "login", "--server", srv.URL, "--token", "good", "--project", "demo", "--ca", caFile); err != nil {
		t.Fatalf("login --ca: %v", err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CA != string(caPEM) {
		t.Errorf("config ca %q, want the CA file's certificate", cfg.CA)
	}
	if err := os.Remove(caFile); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "", "whoami")
	if err != nil {
		t.Fatalf("whoami after login --ca, the CA file gone: %v", err)
	}
	if !strings.Contains(out, "alice") {
		t.Errorf("whoami said %q", out)
	}
	if _, _, err := runCLI(t, "", "whoami", "--ca", caFile); err == nil || !strings.Contains(err.Error(), "--ca") {
		t.Errorf("whoami with a missing --ca file: %v", err)
	}
}
