package clusters_test

import (
	"context"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"atoll.dev/libs/clusters"
)

// openConns is an HTTP/2 TLS server counting its open connections.
type openConns struct {
	srv  *httptest.Server
	mu   sync.Mutex
	open map[net.Conn]bool // mu must be held
}

func newOpenConns(t *testing.T) *openConns {
	o := &openConns{open: map[net.Conn]bool{}}
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) }))
	o.srv.EnableHTTP2 = true
	o.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		o.mu.Lock()
		defer o.mu.Unlock()
		switch s {
		case http.StateNew:
			o.open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(o.open, c)
		}
	}
	o.srv.StartTLS()
	t.Cleanup(o.srv.Close)
	return o
}

func (o *openConns) config() *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: o.srv.Certificate().Raw})
	return &rest.Config{Host: o.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

// waitOpen waits until the server has n connections open.
func (o *openConns) waitOpen(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		o.mu.Lock()
		got := len(o.open)
		o.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server has %d connections open, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// try makes one request on c.
func try(c *clusters.Conn, url string) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func get(t *testing.T, c *clusters.Conn, url string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("request over %s, want HTTP/2", resp.Proto)
	}
}

// TestConnCloseClosesItsConnectionsOnly checks that Close closes the
// connections a Conn opened (an idle HTTP/2 connection keeps a reading
// goroutine), not another Conn's of the same configuration (client-go
// would share one cached transport between them), and that a closed Conn
// dials no more (a reflector's abandoned list would otherwise open a
// connection, and its reading goroutine, after its owner stopped).
func TestConnCloseClosesItsConnectionsOnly(t *testing.T) {
	o := newOpenConns(t)
	a, err := clusters.Connect(o.config())
	if err != nil {
		t.Fatal(err)
	}
	b, err := clusters.Connect(o.config())
	if err != nil {
		t.Fatal(err)
	}
	get(t, a, o.srv.URL)
	get(t, b, o.srv.URL)
	o.waitOpen(t, 2)
	a.Close()
	o.waitOpen(t, 1)
	if err := try(a, o.srv.URL); !errors.Is(err, clusters.ErrClosed) {
		t.Fatalf("request on a closed Conn: %v, want %v", err, clusters.ErrClosed)
	}
	get(t, b, o.srv.URL)
	o.waitOpen(t, 1)
	a.Close()
	b.Close()
	o.waitOpen(t, 0)
	(*clusters.Conn)(nil).Close()
}
