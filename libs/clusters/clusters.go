// Package clusters describes the region's member clusters and how the
// cluster-facing services reach them.
package clusters

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/connrotation"
	"sigs.k8s.io/yaml"
)

// Member is one member cluster of the region.
type Member struct {
	// Name is the cluster's name, a DNS label.
	Name string `json:"name"`
	// Zone is the cluster's failure domain.
	Zone string `json:"zone"`
	// Region is the name of the region the cluster belongs to (Karmada's
	// Cluster spec.region), every pod's ATOLL_REGION; the same for every
	// member.
	Region string `json:"region,omitempty"`
	// Labels are matched by workloads' cluster selectors.
	Labels map[string]string `json:"labels,omitempty"`
	// Kubeconfig is the path of a kubeconfig file for the cluster: the
	// service's own credential there (User), never the cluster's admin.
	Kubeconfig string `json:"kubeconfig"`
	// QPS and Burst bound the requests per second a service's client makes
	// to the cluster, client-side (default DefaultQPS and DefaultBurst), so
	// that a fan-out (logs, a storm of nodes) cannot flood its API server.
	QPS   float32 `json:"qps,omitempty"`
	Burst int     `json:"burst,omitempty"`
}

// Default client-side rate limits of a member client, per service and
// cluster: well above a region's steady rate (the propagator applies a
// shard in one request), below what one service could make an API server
// spend its CPU on.
const (
	DefaultQPS   = 100
	DefaultBurst = 200
)

// Members is the region's member clusters.
type Members []Member

// Load reads a YAML list of members.
func Load(path string) (Members, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's --clusters flag, read as that user
	if err != nil {
		return nil, fmt.Errorf("read clusters file: %w", err)
	}
	var ms Members
	if err := yaml.UnmarshalStrict(b, &ms); err != nil {
		return nil, fmt.Errorf("parse clusters file %s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, m := range ms {
		if m.Name == "" || m.Zone == "" || m.Kubeconfig == "" {
			return nil, fmt.Errorf("clusters file %s: entry %d needs name, zone and kubeconfig", path, i)
		}
		if seen[m.Name] {
			return nil, fmt.Errorf("clusters file %s: cluster %q listed twice", path, m.Name)
		}
		seen[m.Name] = true
	}
	return ms, nil
}

// RESTConfig returns a client configuration with the member's
// client-side rate limit (QPS and Burst, or their defaults) and a
// per-request timeout.
func (m Member) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", m.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("cluster %s kubeconfig: %w", m.Name, err)
	}
	cfg.QPS, cfg.Burst = m.QPS, m.Burst
	if cfg.QPS <= 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst <= 0 {
		cfg.Burst = max(DefaultBurst, int(cfg.QPS))
	}
	cfg.Timeout = 15 * time.Second
	return cfg, nil
}

// Client returns a clientset for the member.
func (m Member) Client() (kubernetes.Interface, *rest.Config, error) {
	cfg, err := m.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster %s client: %w", m.Name, err)
	}
	return cs, cfg, nil
}

// Conn is an HTTP client to a member cluster on a transport and
// connections of its own, for client-go's clients (their
// NewForConfigAndClient): its owner closes the connections when it stops.
// client-go otherwise shares one cached transport per TLS configuration
// in the process, whose connections, and each one's reading goroutine,
// outlive every client.
type Conn struct {
	// HTTP is the client, with cfg.Timeout; a client with another timeout
	// (informers' watches take none) shares its Transport.
	HTTP   *http.Client
	dialer *connrotation.Dialer
	// closed is set by Close: every dial from then on is refused, and one
	// that was under way is closed. Requests can outlive their owner's
	// stop: a reflector's list runs on context.Background in a goroutine
	// its informer no longer waits for, and may wait in the client's rate
	// limiter and dial only after Close.
	closed atomic.Bool
}

// ErrClosed refuses a connection dialed on or across a Close.
var ErrClosed = errors.New("member cluster connection closed")

// Connect returns a Conn for cfg (its TLS, auth, wrappers and timeout).
// It dials nothing yet.
func Connect(cfg *rest.Config) (*Conn, error) {
	cfg = rest.CopyConfig(cfg)
	if err := loadClientCert(cfg); err != nil {
		return nil, err
	}
	c := &Conn{}
	// client-go's own dialer, its connections tracked to close them.
	c.dialer = connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	cfg.Dial = c.dial
	if cfg.Proxy == nil {
		// client-go's default proxy: a config with a proxy function is
		// never cached, so the transport is this Conn's.
		cfg.Proxy = http.ProxyFromEnvironment
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("http client for %s: %w", cfg.Host, err)
	}
	c.HTTP = hc
	return c, nil
}

// loadClientCert reads cfg's client certificate and key files into
// cfg: from files, client-go would reload them with goroutines of each
// transport's that only the garbage collector stops (its TLS cache's
// cleanup). They are read again when the service is made again.
func loadClientCert(cfg *rest.Config) error {
	tc := &cfg.TLSClientConfig
	if tc.CertFile == "" || tc.KeyFile == "" || len(tc.CertData) > 0 || len(tc.KeyData) > 0 {
		return nil
	}
	cert, err := os.ReadFile(tc.CertFile) //nolint:gosec // G304: the path is the member's kubeconfig's, read as that user
	if err != nil {
		return fmt.Errorf("client certificate: %w", err)
	}
	key, err := os.ReadFile(tc.KeyFile) //nolint:gosec // G304: the path is the member's kubeconfig's, read as that user
	if err != nil {
		return fmt.Errorf("client key: %w", err)
	}
	tc.CertData, tc.KeyData, tc.CertFile, tc.KeyFile = cert, key, "", ""
	return nil
}

func (c *Conn) dial(ctx context.Context, network, address string) (net.Conn, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	conn, err := c.dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	// conn is tracked: a Close from now on closes it; one that ran while
	// it was dialed may have missed it.
	if c.closed.Load() {
		_ = conn.Close()
		return nil, ErrClosed
	}
	return conn, nil
}

// Close closes every connection c opened (a request or watch still
// running on one fails) and refuses every later dial: no connection, and
// no goroutine reading one, is left, even for a request that outlives
// its owner's stop. A closed Conn is not used again; its owner connects
// anew. Close on a nil or closed Conn does nothing more.
func (c *Conn) Close() {
	if c != nil {
		c.closed.Store(true)
		c.dialer.CloseAll()
	}
}
