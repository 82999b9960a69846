package attack

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/pki"
)

// natsPKI is a CA and a certificate it signed for a NATS server on
// loopback, usable as the server's and as a route's client certificate.
type natsPKI struct {
	ca     *pki.CA
	caFile string
	cert   tls.Certificate
}

func newNATSPKI(t *testing.T, name string) natsPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.Issue(pki.Request{CommonName: name + " nats", Hosts: []string{"127.0.0.1", "localhost"}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return natsPKI{ca: ca, caFile: filepath.Join(dir, pki.CACertFile), cert: pair}
}

// routeTLS is the routes' TLS as compose and deploy/k8s configure it
// (verify: true): a peer routes only with a certificate trusted roots signed.
func routeTLS(own tls.Certificate, trusted *x509.CertPool) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{own}, RootCAs: trusted, ClientCAs: trusted,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

func startNATS(t *testing.T, o bus.ServerOptions) *server.Server {
	t.Helper()
	o.StoreDir, o.Listen = t.TempDir(), true
	srv, err := bus.StartServer(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

// plaintextPing speaks the NATS protocol in clear to addr (CONNECT, PING)
// and returns what came back until the server closed the connection or 2 s
// passed.
func plaintextPing(t *testing.T, conn net.Conn) string {
	t.Helper()
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	_, _ = fmt.Fprint(conn, "CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPING\r\n")
	var got strings.Builder
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		got.WriteString(line)
		if err != nil {
			return got.String()
		}
	}
}

func freeAddrs(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		defer l.Close()
	}
	return ports
}

// A NATS client port with TLS refuses a plaintext client, and one that
// does not trust the region's CA; a client given the CA file (a service's
// $ATOLL_NATS_CA) connects and sets up the region's streams.
func TestNATSClientPortRefusesPlaintext(t *testing.T) {
	p := newNATSPKI(t, "region")
	srv := startNATS(t, bus.ServerOptions{TLS: &tls.Config{Certificates: []tls.Certificate{p.cert}}})
	addr := srv.Addr().String()

	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := plaintextPing(t, conn); strings.Contains(got, "PONG") {
		t.Errorf("a plaintext client was answered: %q", got)
	}

	if nc, err := nats.Connect("nats://"+addr, nats.Timeout(2*time.Second), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("a client without the region's CA connected")
	} else if !errors.As(err, new(x509.UnknownAuthorityError)) {
		t.Errorf("a client without the region's CA: %v, want an unknown authority", err)
	}

	b, err := bus.Open(t.Context(), bus.Config{URL: "nats://" + addr, Name: "tls-client", CAFile: p.caFile})
	if err != nil {
		t.Fatalf("a client with the CA file: %v", err)
	}
	defer b.Close()
	if !b.NC.TLSRequired() {
		t.Error("the connection is not TLS")
	}
}

// The route port requires TLS with a certificate of the region's CA: a
// plaintext dial, a TLS dial without a client certificate and a server
// whose certificate another CA signed never become routes; a server with
// the region's certificate does (so the refusals are not a route port
// that accepts nobody).
func TestNATSRoutePortRefusesAPeerWithoutRouteCredentials(t *testing.T) {
	region := newNATSPKI(t, "region")
	attacker := newNATSPKI(t, "attacker")
	ports := freeAddrs(t, 6)
	route := func(i int) string { return fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+i]) }
	serverTLS := &tls.Config{Certificates: []tls.Certificate{region.cert}}
	a := startNATS(t, bus.ServerOptions{Name: "a", Port: ports[0], ClusterName: "atoll", ClusterPort: ports[3], Routes: []string{route(0)},
		TLS: serverTLS, ClusterTLS: routeTLS(region.cert, region.ca.Pool())})
	routeAddr := fmt.Sprintf("127.0.0.1:%d", ports[3])

	t.Run("plaintext", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", routeAddr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := plaintextPing(t, conn); strings.Contains(got, "PONG") {
			t.Errorf("a plaintext route was answered: %q", got)
		}
	})
	t.Run("tls without a client certificate", func(t *testing.T) {
		raw, err := net.DialTimeout("tcp", routeAddr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// A TLS route port expects the handshake first.
		conn := tls.Client(raw, &tls.Config{RootCAs: region.ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		if got := plaintextPing(t, conn); strings.Contains(got, "PONG") {
			t.Errorf("a route without a certificate was answered: %q", got)
		}
	})
	t.Run("server with another CA's certificate", func(t *testing.T) {
		startNATS(t, bus.ServerOptions{Name: "forged", Port: ports[1], ClusterName: "atoll", ClusterPort: ports[4], Routes: []string{route(0)},
			ClusterTLS: routeTLS(attacker.cert, region.ca.Pool())})
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if n := a.NumRoutes(); n != 0 {
				t.Fatalf("the forged server became a route (%d routes)", n)
			}
			time.Sleep(100 * time.Millisecond) // watching that nothing happens for 3 s
		}
	})
	t.Run("server with the region's certificate", func(t *testing.T) {
		startNATS(t, bus.ServerOptions{Name: "b", Port: ports[2], ClusterName: "atoll", ClusterPort: ports[5], Routes: []string{route(0)},
			TLS: serverTLS, ClusterTLS: routeTLS(region.cert, region.ca.Pool())})
		deadline := time.Now().Add(10 * time.Second)
		for a.NumRoutes() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the region's own server did not become a route within 10 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
