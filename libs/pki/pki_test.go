package pki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestIssuedCertificateVerifiesForItsHosts(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), "test ca")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.Issue(Request{CommonName: "gateway", Hosts: []string{"localhost", "127.0.0.1", "gateway"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host    string
		wantErr bool
	}{
		{"localhost", false},
		{"127.0.0.1", false},
		{"gateway", false},
		{"nats-1", true},
		{"10.0.0.1", true},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			_, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: tt.host, Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if (err != nil) != tt.wantErr {
				t.Errorf("verify for %s: err %v, want error %v", tt.host, err, tt.wantErr)
			}
		})
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: x509.NewCertPool()}); err == nil {
		t.Error("verified without the CA in the roots")
	}
}

func TestLoadOrCreateCAKeepsTheCA(t *testing.T) {
	dir := t.TempDir()
	a, err := LoadOrCreateCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadOrCreateCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	if !a.Cert.Equal(b.Cert) {
		t.Error("a second LoadOrCreateCA made a new CA")
	}
	fi, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("ca key mode %v, want 0600", fi.Mode().Perm())
	}
	if _, err := LoadPool(filepath.Join(dir, CACertFile)); err != nil {
		t.Errorf("load pool: %v", err)
	}
}

func TestReloaderServesARotatedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(cn string) {
		t.Helper()
		c, err := ca.Issue(Request{CommonName: cn, Hosts: []string{"localhost"}, Server: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Write(dir, "server"); err != nil {
			t.Fatal(err)
		}
	}
	issue("first")
	r, err := NewReloader(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.Subject.CommonName
	}
	if got := cn(); got != "first" {
		t.Fatalf("serving %q, want first", got)
	}
	issue("second")
	deadline := time.Now().Add(5 * time.Second)
	for cn() != "second" {
		if time.Now().After(deadline) {
			t.Fatalf("still serving %q 5 s after the files changed", cn())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A broken pair leaves the last good one served.
	if err := os.WriteFile(filepath.Join(dir, "server.crt"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(CheckEvery + 100*time.Millisecond)
	if got := cn(); got != "second" {
		t.Errorf("after a broken write serving %q, want second", got)
	}
}

func TestServerConfigRefusesTLS11(t *testing.T) {
	if got := ServerConfig(&Reloader{}).MinVersion; got != tls.VersionTLS12 {
		t.Errorf("MinVersion %x, want TLS 1.2", got)
	}
}
