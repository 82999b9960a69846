// Package bus is the one place for Atoll's NATS JetStream plumbing: subject
// names, stream and Key-Value bucket definitions, the connection (embedded
// server or remote URL), idempotent publishing, durable consumers with a
// dead-letter path, compare-and-set updates (Update is the one retry loop),
// breaker-wrapped requests and the work queue (client-go's workqueue).
//
// Each service connects as its own NATS user (permissions.go: Grants, the
// one source of truth for who may do what; natsconf.go: the users' nkeys
// and the server configuration made from them). A one-shot bootstrap as
// the admin user creates the streams and buckets (Bootstrap); a service
// opened with SkipEnsure waits for them instead of creating them, and so
// needs no JetStream admin rights.
//
// Short outages stay short. Open waits, with backoff, for a NATS server
// that is not there yet. A request breaker opens on its target's failures
// only: failures while the caller's own connection is down, reconnecting
// or just back (ErrBusUnavailable) count neither way, and an open breaker
// probes again after a second. Requests retry target failures, the bus's
// outage and an open breaker for a few seconds, so callers wait out a
// brief outage instead of failing.
package bus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config says how to reach the bus. With URL empty an embedded server is
// started in process; otherwise the bus connects to the given NATS URL(s).
type Config struct {
	// URL is a comma-separated list of NATS server URLs; empty means embedded.
	URL string
	// Name is the client connection name, shown by the server.
	Name string
	// StoreDir is the JetStream directory of the embedded server.
	StoreDir string
	// Listen, when true, lets the embedded server also accept TCP clients on
	// a random loopback port (ClientURL reports it); otherwise it is in-process only.
	Listen bool
	// Port fixes the embedded server's client port when Listen is set (0: random).
	Port int
	// Replicas is the replication factor for streams and buckets (default 1).
	Replicas int
	// CredsFile authenticates a remote connection with a NATS JWT
	// credentials file, when set.
	CredsFile string
	// CAFile, when set, makes a remote connection TLS and verifies the
	// server's certificate against the PEM CA certificates in it (a
	// service's --nats-ca, $ATOLL_NATS_CA); a server that requires TLS
	// is verified against the system's roots without it. In-process
	// connections to an embedded server cross no wire and use no TLS.
	CAFile string
	// NKeyFile authenticates as an Atoll user with its credentials file
	// (Auth.CredentialsFile): the user's name and nkey seed. The
	// connection's inboxes are then InboxPrefix(user), the only ones the
	// user may subscribe to.
	NKeyFile string
	// Auth turns on users and permissions in the embedded server: it
	// accepts only Auth's users. The bus's own connection is the admin
	// unless NKeyFile says otherwise.
	Auth *Auth
	// MaxBytes changes the size limits of the streams and buckets Open
	// ensures (by stream or bucket name; the others keep DefaultMaxBytes).
	MaxBytes map[string]int64
	// SkipEnsure opens without creating the streams and buckets: Open
	// waits, with backoff, until those the user reads exist (made by
	// Bootstrap). Services whose user may not create them need it.
	SkipEnsure bool
	// Logger receives connection state changes; slog.Default() when nil.
	Logger *slog.Logger
}

// EnvCAFile is the environment variable that names the PEM CA file a
// service or tool verifies its NATS servers with (Config.CAFile).
const EnvCAFile = "ATOLL_NATS_CA"

// WithCredentials returns c authenticating with the credentials file at
// path: an Atoll user's (Auth.CredentialsFile) as NKeyFile, anything else
// (a NATS JWT .creds file) as CredsFile. An empty path changes nothing.
func (c Config) WithCredentials(path string) Config {
	switch {
	case path == "":
	case isAtollCredentials(path):
		c.NKeyFile = path
	default:
		c.CredsFile = path
	}
	return c
}

// WithCA returns c verifying the servers with the PEM CA file at path,
// over TLS (CAFile). An empty path changes nothing.
func (c Config) WithCA(path string) Config {
	if path != "" {
		c.CAFile = path
	}
	return c
}

// Bus is a connection to a region's NATS JetStream system.
type Bus struct {
	// NC is the core NATS connection.
	NC *nats.Conn
	// JS is the JetStream API on NC.
	JS jetstream.JetStream

	srv  *server.Server
	cfg  Config
	log  *slog.Logger
	user string // the NATS user connected as (NKeyFile), "" without one

	streams sync.Map // stream name -> jetstream.Stream, looked up once

	reconnectMu sync.Mutex
	reconnected chan struct{} // reconnectMu must be held; closed at the next reconnect
	// dropped is cancelled, and replaced, each time the connection drops
	// (UntilDisconnected). reconnectMu must be held.
	dropped context.Context
	dropAll context.CancelFunc // reconnectMu must be held; cancels dropped
	// inProc is the embedded server b's connection reaches in process
	// (its own or its parent's), for Dial.
	inProc *server.Server
	// loads admits one whole-bucket replay (a mirror filling) at a time
	// on the connection (LoadSlot).
	loads loadSlots
}

// Open starts an embedded server or connects to cfg.URL, and ensures the
// region's topology exists (with SkipEnsure: waits until it does). A
// server at cfg.URL that cannot be reached, or whose JetStream is not
// ready yet, is waited for: Open keeps trying with jittered backoff
// (ConnectRetryBase doubling up to ConnectRetryMax), logging each
// failure, until ctx ends.
func Open(ctx context.Context, cfg Config) (*Bus, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	b := &Bus{cfg: cfg, log: cfg.Logger.With("component", "bus")}
	if _, err := b.topology(); err != nil {
		return nil, fmt.Errorf("open bus: %w", err)
	}
	if cfg.URL == "" {
		if cfg.StoreDir == "" {
			return nil, errors.New("open bus: embedded server needs a StoreDir")
		}
		if cfg.Auth != nil && cfg.NKeyFile == "" {
			b.cfg.NKeyFile = cfg.Auth.CredentialsFile(UserAdmin)
		}
		srv, err := StartServer(ServerOptions{StoreDir: cfg.StoreDir, Listen: cfg.Listen, Port: cfg.Port, Auth: cfg.Auth})
		if err != nil {
			return nil, err
		}
		b.srv = srv
		if err := b.connectTo(srv, cfg.Name); err != nil {
			b.shutdownServer()
			return nil, err
		}
		if err := b.ready(ctx); err != nil {
			b.Close()
			return nil, err
		}
		return b, nil
	}
	err := b.retry(ctx, cfg.Name, func() error {
		if err := b.connectTo(nil, cfg.Name); err != nil {
			return err
		}
		if cfg.SkipEnsure {
			return nil
		}
		if err := b.ensureTopology(ctx); err != nil {
			b.NC.Close()
			return err
		}
		return nil
	})
	if err == nil && cfg.SkipEnsure {
		if err = b.waitTopology(ctx); err != nil {
			b.NC.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open bus: %w", err)
	}
	return b, nil
}

// ready ensures the topology, or with SkipEnsure waits for it.
func (b *Bus) ready(ctx context.Context) error {
	if b.cfg.SkipEnsure {
		return b.waitTopology(ctx)
	}
	return b.ensureTopology(ctx)
}

// waitTopology waits, with backoff, until the streams b's user reads exist
// (every stream for the admin or without users).
func (b *Bus) waitTopology(ctx context.Context) error {
	var names []string
	if g, ok := Grants()[b.user]; ok {
		names = g.Streams()
	} else {
		t := DefaultTopology(1)
		for _, s := range t.Streams {
			names = append(names, s.Name)
		}
		for _, k := range t.Buckets {
			names = append(names, kvStream(k.Bucket))
		}
	}
	delay := ConnectRetryBase
	for attempt := 1; ; attempt++ {
		var missing []string
		var last error
		for _, n := range names {
			rctx, cancel := context.WithTimeout(ctx, EnsureRequestTimeout)
			_, err := b.Stream(rctx, n)
			cancel()
			if err != nil {
				missing, last = append(missing, n), err
			}
		}
		if len(missing) == 0 {
			return nil
		}
		wait := Jitter(delay, 0.2)
		b.log.Warn("bus topology not bootstrapped yet, waiting", "connection", b.cfg.Name, "missing", missing, "attempt", attempt, "retry_in", wait, "err", last)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for streams %s: %w (last: %w)", strings.Join(missing, ", "), ctx.Err(), last)
		case <-t.C:
		}
		delay = min(2*delay, ConnectRetryMax)
	}
}

// Bootstrap creates or updates the region's streams and buckets at
// cfg.Replicas, connected as cfg's user (the admin), and disconnects: the
// one-shot job that lets services open with SkipEnsure.
func Bootstrap(ctx context.Context, cfg Config) error {
	cfg.SkipEnsure = false
	b, err := Open(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	b.Close()
	return nil
}

// Delays between attempts to reach a NATS server that is not there yet.
const (
	ConnectRetryBase = 100 * time.Millisecond
	ConnectRetryMax  = 5 * time.Second
)

// retry runs fn until it succeeds or ctx ends, waiting between attempts.
func (b *Bus) retry(ctx context.Context, name string, fn func() error) error {
	delay := ConnectRetryBase
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			if attempt > 1 {
				b.log.Info("nats reachable", "connection", name, "attempts", attempt)
			}
			return nil
		}
		wait := Jitter(delay, 0.2)
		b.log.Warn("nats not reachable, retrying", "connection", name, "url", b.cfg.URL, "attempt", attempt, "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (after %d attempts, last: %w)", ctx.Err(), attempt, err)
		case <-t.C:
		}
		delay = min(2*delay, ConnectRetryMax)
	}
}

// Connect opens another connection, named name, to the NATS system b is
// connected to; closing it leaves b and its embedded server running. The
// services of an all-in-one region each get their own, as they do in
// production, so a burst on one service's connection never queues another
// service's requests behind it. It tries once; ConnectContext waits for a
// server that cannot be reached.
func (b *Bus) Connect(name string) (*Bus, error) {
	c := b.child(name)
	if err := c.connectTo(b.srv, name); err != nil {
		return nil, err
	}
	return c, nil
}

// ConnectContext is Connect that keeps trying, with backoff, until the
// server can be reached or ctx ends.
func (b *Bus) ConnectContext(ctx context.Context, name string) (*Bus, error) {
	c := b.child(name)
	if err := c.retry(ctx, name, func() error { return c.connectTo(b.srv, name) }); err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	return c, nil
}

// ConnectAs is Connect as the user of the credentials file nkeyFile (see
// Config.NKeyFile), as each service of an all-in-one region connects.
func (b *Bus) ConnectAs(name, nkeyFile string) (*Bus, error) {
	c := b.child(name)
	c.cfg.NKeyFile = nkeyFile
	if err := c.connectTo(b.srv, name); err != nil {
		return nil, err
	}
	return c, nil
}

func (b *Bus) child(name string) *Bus {
	c := &Bus{cfg: b.cfg, log: b.log}
	c.cfg.Name = name
	return c
}

// User is the NATS user b is connected as, "" without one (no NKeyFile).
func (b *Bus) User() string { return b.user }

// connectTo connects b to srv in process, or to b's URL when srv is nil.
func (b *Bus) connectTo(srv *server.Server, name string) error {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				b.log.Warn("nats disconnected", "connection", name, "err", err)
			}
			b.signalDisconnect()
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			b.log.Info("nats reconnected", "connection", name, "url", nc.ConnectedUrl())
			b.signalReconnect()
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			// A watch's consumer goes with its connection at shutdown, and
			// the watch makes a new one when it is still wanted.
			level := slog.LevelWarn
			if errors.Is(err, nats.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				level = slog.LevelDebug
			}
			b.log.Log(context.Background(), level, "nats async error", "connection", name, "subject", subject, "err", err)
		}),
	}
	url := b.cfg.URL
	if srv != nil {
		opts = append(opts, nats.InProcessServer(srv))
		url = srv.ClientURL()
		b.inProc = srv
	} else {
		if b.cfg.CredsFile != "" {
			opts = append(opts, nats.UserCredentials(b.cfg.CredsFile))
		}
		if b.cfg.CAFile != "" {
			opts = append(opts, nats.RootCAs(b.cfg.CAFile)) // TLS 1.2 at least
		}
	}
	user := ""
	if b.cfg.NKeyFile != "" {
		u, err := CredentialsUser(b.cfg.NKeyFile)
		if err != nil {
			return err
		}
		nk, err := nats.NkeyOptionFromSeed(b.cfg.NKeyFile)
		if err != nil {
			return fmt.Errorf("nats credentials %s: %w", b.cfg.NKeyFile, err)
		}
		user = u
		opts = append(opts, nk, nats.CustomInboxPrefix(InboxPrefix(u)))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("connect to nats %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("jetstream: %w", err)
	}
	b.NC, b.JS, b.user = nc, js, user
	return nil
}

// ServerOptions configures an embedded NATS server.
type ServerOptions struct {
	// StoreDir is the JetStream storage directory.
	StoreDir string
	// Listen opens a TCP listener on 127.0.0.1 at a random port.
	Listen bool
	// Name is the server name (required in a cluster).
	Name string
	// Port fixes the client port when Listen is set (0: random).
	Port int
	// ClusterName, ClusterPort and Routes make the server a cluster member.
	ClusterName string
	ClusterPort int
	Routes      []string
	// Auth, when set, makes the server accept only its users, each with
	// its permissions; without it anyone may connect and do anything.
	Auth *Auth
	// TLS, when set, makes the client port accept TLS connections only
	// (TLS 1.2 at least): a plaintext client is refused.
	TLS *tls.Config
	// ClusterTLS, when set, secures the routes: its Certificates are the
	// server's (as server and as client of the routes it dials), RootCAs
	// verify the peers it dials, and with ClientAuth set to
	// tls.RequireAndVerifyClientCert (and ClientCAs) only a peer with a
	// certificate the CA signed may route: that is the routes'
	// authorization.
	ClusterTLS *tls.Config
}

// StartServer starts an embedded nats-server with JetStream on and waits
// until it accepts connections.
func StartServer(o ServerOptions) (*server.Server, error) {
	opts := &server.Options{
		ServerName: o.Name,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		Host:       "127.0.0.1",
		Port:       -1,
		NoSigs:     true,
		DontListen: !o.Listen,
	}
	if o.Port > 0 {
		opts.Port = o.Port
	}
	if o.Auth != nil {
		opts.Nkeys = o.Auth.ServerUsers()
		opts.AuthCallout = o.Auth.ServerAuthCallout()
	}
	if o.TLS != nil {
		opts.TLSConfig = withMinTLS12(o.TLS)
		opts.TLS, opts.TLSTimeout = true, tlsTimeout
	}
	if o.ClusterName != "" {
		opts.Cluster = server.ClusterOpts{Name: o.ClusterName, Host: "127.0.0.1", Port: o.ClusterPort}
		if o.ClusterTLS != nil {
			opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = withMinTLS12(o.ClusterTLS), tlsTimeout
		}
		opts.Routes = server.RoutesFromStr(joinComma(o.Routes))
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("new nats server: %w", err)
	}
	if os.Getenv("ATOLL_NATS_DEBUG") != "" {
		srv.ConfigureLogger()
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("embedded nats server not ready after 10s")
	}
	return srv, nil
}

func joinComma(s []string) string { return strings.Join(s, ",") }

// tlsTimeout bounds a TLS handshake with the embedded server, in seconds.
const tlsTimeout = 2

func withMinTLS12(c *tls.Config) *tls.Config {
	c = c.Clone()
	c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
	return c
}

// Server returns the embedded server, or nil when connected to a URL.
func (b *Bus) Server() *server.Server { return b.srv }

// ClientURL returns a URL other processes can use to reach the embedded
// server (only when Config.Listen was set), or the connected URL.
func (b *Bus) ClientURL() string {
	if b.srv != nil && b.cfg.Listen {
		return b.srv.ClientURL()
	}
	return b.NC.ConnectedUrl()
}

// EnsureRequestTimeout bounds each stream or bucket request of Ensure: a
// request sent while a new JetStream cluster elects its meta leader can
// go unanswered, and would otherwise wait for the caller's whole deadline
// instead of being retried (Open retries Ensure).
const EnsureRequestTimeout = 10 * time.Second

// Ensure creates or updates the given streams and buckets; buckets deny
// purges and rollups (limits.go).
func (b *Bus) Ensure(ctx context.Context, t Topology) error {
	for _, sc := range t.Streams {
		rctx, cancel := context.WithTimeout(ctx, EnsureRequestTimeout)
		_, err := b.JS.CreateOrUpdateStream(rctx, sc)
		cancel()
		if err != nil {
			return fmt.Errorf("ensure stream %s: %w", sc.Name, err)
		}
	}
	for _, kc := range t.Buckets {
		rctx, cancel := context.WithTimeout(ctx, EnsureRequestTimeout)
		err := b.ensureBucket(rctx, kc)
		cancel()
		if err != nil {
			return fmt.Errorf("ensure bucket %s: %w", kc.Bucket, err)
		}
	}
	return nil
}

// KV returns a handle on a named bucket.
func (b *Bus) KV(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := b.JS.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bucket, err)
	}
	return kv, nil
}

// Stream returns a handle on a named stream. Looking one up is a
// stream-info request, so the handle is kept for the next call.
func (b *Bus) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if s, ok := b.streams.Load(name); ok {
		return s.(jetstream.Stream), nil
	}
	s, err := b.JS.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", name, err)
	}
	b.streams.Store(name, s)
	return s, nil
}

// Close drains the connection and stops the embedded server, if any.
func (b *Bus) Close() {
	if b.NC != nil {
		_ = b.NC.Drain()
		// Drain is asynchronous; wait briefly for it to finish.
		deadline := time.Now().Add(5 * time.Second)
		for !b.NC.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		b.NC.Close()
	}
	b.shutdownServer()
}

func (b *Bus) shutdownServer() {
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
}

// Reconnected returns a channel closed at the connection's next reconnect.
// Watches re-establish themselves on it: after a server restart a watch's
// ordered consumer is gone, and the client library would notice only after
// several missed heartbeats.
func (b *Bus) Reconnected() <-chan struct{} {
	b.reconnectMu.Lock()
	defer b.reconnectMu.Unlock()
	if b.reconnected == nil {
		b.reconnected = make(chan struct{})
	}
	return b.reconnected
}

// UntilDisconnected returns a copy of ctx that is also cancelled, with
// cause ErrBusUnavailable, when the connection next drops, and its cancel
// function. A JetStream or Key-Value call in flight when the connection
// drops is lost with it (its request or its reply), and nats.go would
// wait out the call's whole deadline (or the JetStream API's default
// timeout) for it: with this context the call ends as the connection
// drops. Work that holds a lock across such calls uses it, so that one
// call lost in an outage does not keep the lock, and everything queued
// behind it, for that long after the bus is back. A call made while the
// connection is down is sent when it reconnects and is not cancelled.
func (b *Bus) UntilDisconnected(ctx context.Context) (context.Context, context.CancelFunc) {
	b.reconnectMu.Lock()
	if b.dropped == nil {
		b.dropped, b.dropAll = context.WithCancel(context.Background())
	}
	dropped := b.dropped
	b.reconnectMu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(dropped, func() { cancel(ErrBusUnavailable) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// signalDisconnect ends the contexts of UntilDisconnected.
func (b *Bus) signalDisconnect() {
	b.reconnectMu.Lock()
	defer b.reconnectMu.Unlock()
	if b.dropped != nil {
		b.dropAll()
		b.dropped, b.dropAll = nil, nil
	}
}

func (b *Bus) signalReconnect() {
	b.reconnectMu.Lock()
	defer b.reconnectMu.Unlock()
	if b.reconnected != nil {
		close(b.reconnected)
	}
	b.reconnected = make(chan struct{})
}
