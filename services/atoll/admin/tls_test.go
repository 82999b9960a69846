package admin

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"atoll.dev/libs/pki"
)

// bootstrap tls makes a CA, a NATS certificate good for clients and
// routes, and a gateway certificate that cannot pass as a route; a second
// run keeps them.
func TestBootstrapTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	run := func() {
		t.Helper()
		root := Root()
		root.SetArgs([]string{"bootstrap", "tls", "--dir", dir, "--nats-hosts", "nats-1,nats-2,127.0.0.1", "--gateway-hosts", "gateway,localhost"})
		root.SetOut(&bytes.Buffer{})
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
	}
	run()
	pool, err := pki.LoadPool(filepath.Join(dir, pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(name string) *x509.Certificate {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		return pair.Leaf
	}
	tests := []struct {
		cert, host string
		usage      x509.ExtKeyUsage
		wantErr    bool
	}{
		{"nats", "nats-2", x509.ExtKeyUsageServerAuth, false},
		{"nats", "127.0.0.1", x509.ExtKeyUsageClientAuth, false}, // a route dialing out
		{"nats", "gateway", x509.ExtKeyUsageServerAuth, true},
		{"gateway", "gateway", x509.ExtKeyUsageServerAuth, false},
		{"gateway", "localhost", x509.ExtKeyUsageClientAuth, true}, // no route with the gateway's certificate
	}
	for _, tt := range tests {
		_, err := leaf(tt.cert).Verify(x509.VerifyOptions{DNSName: tt.host, Roots: pool, KeyUsages: []x509.ExtKeyUsage{tt.usage}})
		if (err != nil) != tt.wantErr {
			t.Errorf("%s for %s (usage %v): err %v, want error %v", tt.cert, tt.host, tt.usage, err, tt.wantErr)
		}
	}
	before, err := os.ReadFile(filepath.Join(dir, "nats.crt"))
	if err != nil {
		t.Fatal(err)
	}
	run()
	after, err := os.ReadFile(filepath.Join(dir, "nats.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("a second run replaced the NATS certificate")
	}
}
