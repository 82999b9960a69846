// Package gateway is the Compute API: the one door of a region for users
// and tools. It authenticates every caller (API tokens kept as digests, or
// JWTs verified against a JWKS), authorizes per project, rate-limits per
// identity, audits every mutating call on atoll.audit.<project>.<verb>,
// serves reads from a watch-fed cache, sends writes to admission, proxies
// logs and exec through the cluster-facing side over the bus, streams
// events as Server-Sent Events, and serves the OpenAPI contract, its
// rendered docs and the web console. It holds no member-cluster
// credentials and writes no control state.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
	"atoll.dev/services/gateway/cache"
	"atoll.dev/services/gateway/console"
)

// Config configures the gateway.
type Config struct {
	// Listen is the HTTP address (default 127.0.0.1:8080; ":0" picks a port).
	Listen string `json:"listen"`
	// TLS is the certificate the gateway serves HTTPS with (tls.go);
	// without one it serves plain HTTP (tests and development only).
	TLS TLSConfig `json:"tls"`
	// Auth names the tokens file and the JWKS.
	Auth auth.Config `json:"auth"`
	// Authenticator, when set, is used instead of loading Auth (atoll dev, tests).
	Authenticator *auth.Authenticator `json:"-"`
	// EventsIssuerFile is the events issuer's seed (libs/bus
	// Auth.EventsIssuerFile): with it the gateway answers the NATS auth
	// callout and issues events credentials (eventcreds.go).
	EventsIssuerFile string `json:"eventsIssuerFile"`
	// EventsNATSURL is the NATS URL events credentials are told to use.
	EventsNATSURL string `json:"eventsNATSURL"`
	// RatePerSecond and Burst limit each identity (defaults 50 and 100).
	RatePerSecond float64 `json:"ratePerSecond"`
	Burst         int     `json:"burst"`
	// MaxBodyBytes caps request bodies (default 1 MiB).
	MaxBodyBytes int64 `json:"maxBodyBytes"`
	// ReadYourWrites bounds how long a write waits for the cache to show it (default 2 s).
	ReadYourWrites time.Duration `json:"readYourWrites"`
	// TrustedProxies are the CIDRs (or addresses) of the load balancers in
	// front of the gateway: only a peer among them is believed about the
	// client's address (X-Forwarded-For), which keys the failed-login limit.
	TrustedProxies []string `json:"trustedProxies"`
	// PublicURL is the gateway's own URL as browsers reach it
	// ("https://atoll.example.com"): a browser's exec WebSocket must come
	// from that origin. Empty: from the host the request was sent to.
	PublicURL string `json:"publicURL"`
	// SelfServiceProjects lets any signed-in user create projects, which
	// it owns and administers; otherwise only platform admins create them.
	SelfServiceProjects bool `json:"selfServiceProjects"`
	// MaxProjectsPerUser is how many projects a user may create by
	// self-service (default DefaultMaxProjectsPerUser).
	MaxProjectsPerUser int `json:"maxProjectsPerUser"`
}

// DefaultConfig is the gateway's configuration when none is given.
func DefaultConfig() *Config { return &Config{} }

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.RatePerSecond == 0 {
		c.RatePerSecond = 50
	}
	if c.Burst == 0 {
		c.Burst = 100
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.ReadYourWrites == 0 {
		c.ReadYourWrites = 2 * time.Second
	}
	if c.MaxProjectsPerUser == 0 {
		c.MaxProjectsPerUser = DefaultMaxProjectsPerUser
	}
}

// Service is the gateway.
type Service struct {
	cfg    Config
	bus    *bus.Bus
	log    *slog.Logger
	auth   *auth.Authenticator
	req    *bus.Requester
	limits *limiter
	// proxies are Config.TrustedProxies, parsed.
	proxies []netip.Prefix
	// metricLimits bounds the custom metric samples pushed per App
	// (metricsapi.go).
	metricLimits *limiter

	cache    *cache.Cache
	clusters *bus.Mirror
	quota    *bus.Mirror // the projects' ledgers (api.QuotaProjectFilter)
	// quotaDefaults holds the region's default quota (api.QuotaDefaultsKey).
	quotaDefaults *bus.Mirror
	idem          jetstream.KeyValue
	events        *eventCreds // nil without Config.EventsIssuerFile
	js            jetstream.JetStream

	// projects mirrors the registered projects; members indexes their
	// roles (projects.go).
	projects *bus.TypedMirror[*api.ProjectDoc]
	members  *memberships
	// tokens indexes the projects' tokens (tokens.go).
	tokens *tokenIndex

	srv    *http.Server
	ln     net.Listener
	cancel context.CancelFunc
	wg     sync.WaitGroup
	reqs   *httpMetrics // nil without an admin server (metrics.go)
	launch *launchSLI   // nil without an admin server

	// streamsCtx ends when the gateway stops: watches, log streams and exec
	// sessions never finish by themselves.
	streamsCtx    context.Context
	streamsCancel context.CancelFunc
	streams       streamCounter

	ids *requestIDs // the X-Request-Id of each request
	// origin is Config.PublicURL's scheme and host, "" when not configured
	// (exec_browser.go).
	origin string
}

// New builds the gateway.
func New(b *bus.Bus, log *slog.Logger, cfg *Config) (*Service, error) {
	if cfg == nil {
		cfg = DefaultConfig()
	}
	c := *cfg
	c.defaults()
	proxies, err := parseProxies(c.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	origin, err := publicOrigin(c.PublicURL)
	if err != nil {
		return nil, err
	}
	a := c.Authenticator
	if a == nil {
		if c.Auth.Logger == nil {
			c.Auth.Logger = log.With("service", "gateway")
		}
		if a, err = auth.New(c.Auth); err != nil {
			return nil, fmt.Errorf("gateway auth: %w", err)
		}
	}
	return &Service{
		cfg:    c,
		bus:    b,
		log:    log.With("service", "gateway"),
		auth:   a,
		req:    bus.NewRequester(b.NC, bus.RequestPolicy{Timeout: 5 * time.Second}),
		limits: newLimiter(c.RatePerSecond, c.Burst),
		js:     b.JS,

		metricLimits: newLimiter(MetricPushPerSecond, MetricPushBurst),
		members:      newMemberships(),
		tokens:       newTokenIndex(),
		ids:          newRequestIDs(),
		proxies:      proxies,
		origin:       origin,
	}, nil
}

// Start loads the caches and begins serving. A Start that fails has
// stopped what it started.
func (s *Service) Start(ctx context.Context) (err error) {
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.streamsCtx, s.streamsCancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			_ = s.Stop(context.WithoutCancel(ctx))
		}
	}()
	if s.clusters, err = s.bus.Mirror(runCtx, bus.BucketClusters, nil); err != nil {
		return fmt.Errorf("mirror clusters: %w", err)
	}
	// Only the projects' ledgers: not every workload's reservation.
	if s.quota, err = s.bus.MirrorFiltered(runCtx, bus.BucketQuota, api.QuotaProjectFilter, nil); err != nil {
		return fmt.Errorf("mirror quota: %w", err)
	}
	if s.quotaDefaults, err = s.bus.MirrorFiltered(runCtx, bus.BucketQuota, api.QuotaDefaultsKey, nil); err != nil {
		return fmt.Errorf("mirror quota defaults: %w", err)
	}
	if s.idem, err = s.bus.KV(ctx, bus.BucketIdempotency); err != nil {
		return fmt.Errorf("idempotency bucket: %w", err)
	}
	// The events credentials first: the projects' watch revokes those of
	// a project being deleted.
	if s.cfg.EventsIssuerFile != "" {
		if s.events, err = startEventCreds(ctx, s.bus, s.log, s.cfg.EventsIssuerFile, s.cfg.EventsNATSURL); err != nil {
			return err
		}
	}
	if err := s.startProjects(ctx, runCtx); err != nil {
		return err
	}
	if err := s.startTokens(ctx, runCtx); err != nil {
		return err
	}
	// The small mirrors (a key per cluster, per project's ledger) are
	// filled before the gateway serves; the workloads' cache is not: it
	// answers from the buckets while it fills (cache.go), so the gateway
	// is ready in the same time at 100 workloads and at 100,000. It
	// starts last, as a connection fills one mirror at a time.
	for name, m := range map[string]*bus.Mirror{"clusters": s.clusters, "quota": s.quota, "quota defaults": s.quotaDefaults} {
		select {
		case <-m.Ready():
		case <-ctx.Done():
			return fmt.Errorf("%s mirror not ready: %w", name, ctx.Err())
		}
	}
	if s.cache, err = cache.Start(runCtx, s.bus, renderWorkload, s.log); err != nil {
		return err
	}
	s.wg.Go(func() {
		start := time.Now()
		select {
		case <-s.cache.Ready():
			s.log.Info("gateway cache filled", "workloads", s.cache.Len(), "took", time.Since(start).Round(time.Millisecond))
		case <-runCtx.Done():
		}
	})
	s.ln, err = new(net.ListenConfig).Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway listen %s: %w", s.cfg.Listen, err)
	}
	if s.ln, err = s.listenTLS(s.ln); err != nil {
		_ = s.ln.Close()
		s.ln = nil
		return err
	}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	s.wg.Go(func() {
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("gateway serve", "err", err)
		}
	})
	s.wg.Go(func() { s.limits.sweep(runCtx) })
	s.wg.Go(func() { s.metricLimits.sweep(runCtx) })
	if s.launch != nil {
		s.wg.Go(func() { s.launch.run(runCtx, s.js, s.log) })
	}
	s.log.Info("gateway listening", "url", s.URL())
	return nil
}

// Stop ends the streams, lets calls in flight finish for up to 5 s, then
// stops the caches.
func (s *Service) Stop(ctx context.Context) error {
	if s.streamsCancel != nil {
		s.streamsCancel()
	}
	if s.srv != nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(sctx); err != nil {
			_ = s.srv.Close()
		}
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.cache.Stop()
	s.clusters.Stop()
	s.quota.Stop()
	s.quotaDefaults.Stop()
	s.projects.Stop()
	s.events.stop()
	s.wg.Wait()
	return nil
}

// URL is where the gateway listens.
func (s *Service) URL() string {
	if s.ln == nil {
		return ""
	}
	if s.cfg.TLS.Enabled() {
		return "https://" + s.ln.Addr().String()
	}
	return "http://" + s.ln.Addr().String()
}

// Auth is the gateway's authenticator (to mint tokens in atoll-dev and tests).
func (s *Service) Auth() *auth.Authenticator { return s.auth }

// Cache is the gateway's read cache.
func (s *Service) Cache() *cache.Cache { return s.cache }

// Filled reports whether the workloads' cache is full: until then the
// gateway answers from the buckets (cache.go).
func (s *Service) Filled() bool { return s.cache != nil && s.cache.Filled() }

// Handler is the gateway's HTTP handler.
func (s *Service) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.ids.middleware, s.accessLog, middleware.Recoverer, securityHeaders(false), hsts)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	r.Get("/readyz", s.readyz)
	r.Get("/openapi.yaml", serveSpec)
	r.Get("/openapi.json", serveSpecJSON)
	r.Get("/docs", serveDocs)
	r.Handle("/console/*", http.StripPrefix("/console", console.Handler()))
	r.Get("/console", http.RedirectHandler("/console/", http.StatusMovedPermanently).ServeHTTP)
	r.Get("/", http.RedirectHandler("/console/", http.StatusFound).ServeHTTP)
	r.Group(func(r chi.Router) {
		r.Use(securityHeaders(true), s.bodyLimit, s.authenticate, s.rateLimit, s.auditMutations)
		computeapi.HandlerWithOptions(s, computeapi.ChiServerOptions{
			BaseRouter:       r,
			ErrorHandlerFunc: s.paramError,
		})
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusNotFound, "NotFound", "no such path: "+r.URL.Path)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method+" is not allowed on "+r.URL.Path)
	})
	return r
}

// readyz is the API port's readiness, the same as the admin port's
// gateway check.
func (s *Service) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.Ready(r.Context()); err != nil {
		// The detail is on the admin port's /readyz, not on the public one.
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// accessLog logs each request (at debug level) and records its metrics.
func (s *Service) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		f := &failure{}
		next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), failureKey, f)))
		elapsed := time.Since(start)
		s.reqs.observe(r, ww.Status(), elapsed)
		if f.err != nil {
			s.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "status", ww.Status(), "err", f.err,
				"request_id", middleware.GetReqID(r.Context()))
		}
		s.log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", ww.Status(),
			"bytes", ww.BytesWritten(), "ms", elapsed.Milliseconds(), "request_id", middleware.GetReqID(r.Context()))
	})
}
