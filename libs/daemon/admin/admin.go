// Package admin is a service's admin HTTP port: /metrics (Prometheus),
// /healthz (the process is alive) and /readyz (ready to do its work).
//
// # One registry per service
//
// Each service replica has its own prometheus.Registry, made here and
// handed to its code through fx (Server.Registerer, Server.Metrics), never
// the global default registry: `atoll-dev` and the end-to-end tests run
// every service, several replicas each, in one process, and each
// replica's /metrics must show its own counts only. Every series carries a
// constant label service=<name>, so series of several services stay apart
// wherever they meet (one Prometheus, a federation, a test that gathers
// every replica's registry). The Go runtime and process collectors are on
// each registry too.
//
// # Health and readiness
//
// /healthz answers 200 while the process serves HTTP at all: the liveness
// probe. /readyz answers 200 once the fx application has started (Started)
// and every readiness check passes, 503 listing the failing checks before:
// the bus connected (Module adds it), then each service's own (its buckets
// open, its lease state known, the caches it answers from at once
// synced), which it registers with AddCheck, usually as its Ready method
// through daemon.ServiceModule. Caches that hold every workload may fill
// behind readiness (daemon.Filler: the gauge atoll_caches_filled), as a
// Kubernetes controller's informers sync after it is ready. daemon.Main starts
// the port before it connects to the bus, so a service waiting for NATS is
// alive and not ready.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/fx"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
)

// Config configures a service's admin server.
type Config struct {
	// Service names the service: the service label of every series.
	Service string
	// Listen is the HTTP address: host:port, ":0" or "127.0.0.1:0" for a
	// free port, "" for no port (the registry and checks still work).
	Listen string
	// Profiling serves the Go runtime's profiles under /debug/pprof/
	// (net/http/pprof): CPU, heap, allocations, goroutines. They show the
	// process's internals, so it is off by default, and the admin port
	// should not be reachable from outside the cluster.
	Profiling bool
}

// Check is a readiness check: nil when ready, else why not.
type Check func(ctx context.Context) error

// CheckTimeout bounds all of one /readyz answer's checks together.
const CheckTimeout = 2 * time.Second

// Server is a service's metrics registry, readiness checks and admin port.
type Server struct {
	service   string
	profiling bool
	reg       *prometheus.Registry
	wrapped   prometheus.Registerer
	metrics   *bus.Metrics
	log       *slog.Logger

	mu      sync.Mutex
	checks  []namedCheck // mu must be held
	started bool         // mu must be held

	ln      net.Listener
	srv     *http.Server
	serving sync.WaitGroup // srv's Serve
}

type namedCheck struct {
	name  string
	check Check
}

// New returns a service's admin server, listening at once when
// cfg.Listen is set (so a service still waiting for NATS answers its
// probes); Close stops it.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.Service == "" {
		return nil, errors.New("admin: empty service name")
	}
	if log == nil {
		log = slog.Default()
	}
	reg := prometheus.NewRegistry()
	s := &Server{
		service:   cfg.Service,
		profiling: cfg.Profiling,
		reg:       reg,
		wrapped:   prometheus.WrapRegistererWith(prometheus.Labels{"service": cfg.Service}, reg),
		log:       log.With("component", "admin"),
	}
	s.wrapped.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.metrics = bus.NewMetrics(s.wrapped)
	if cfg.Listen == "" {
		return s, nil
	}
	// New has no context (it runs before fx starts anything) and a listen
	// on a local address does not block.
	ln, err := net.Listen("tcp", cfg.Listen) //nolint:noctx // see above
	if err != nil {
		return nil, fmt.Errorf("admin listen %s: %w", cfg.Listen, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	s.serving.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin serve", "err", err)
		}
	})
	// At debug: the service's one start line (daemon.FxLogger) names the address.
	s.log.Debug("admin listening", "url", s.URL())
	return s, nil
}

// Close stops the admin port, letting answers in flight finish until ctx ends.
func (s *Server) Close(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	s.serving.Wait()
	return err
}

// URL is the admin port's base URL ("" without a port).
func (s *Server) URL() string {
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// Service is the service's name.
func (s *Server) Service() string { return s.service }

// Registry is the service's registry, to gather from (tests, a region
// that serves several services' metrics).
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Registerer registers a service's own metrics, with its service label.
func (s *Server) Registerer() prometheus.Registerer { return s.wrapped }

// Metrics are libs/bus's metrics on this registry: for Bus.Serve, queues,
// breakers and leases. A nil Server gives nil (no metrics).
func (s *Server) Metrics() *bus.Metrics {
	if s == nil {
		return nil
	}
	return s.metrics
}

// AddCheck adds a readiness check; a nil Server ignores it.
func (s *Server) AddCheck(name string, c Check) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks = append(s.checks, namedCheck{name, c})
}

// MarkStarted says the application has started: until then the service
// is not ready whatever its checks say.
func (s *Server) MarkStarted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
}

// Ready runs the readiness checks; its error lists every failing one.
func (s *Server) Ready(ctx context.Context) error {
	s.mu.Lock()
	checks := append([]namedCheck(nil), s.checks...)
	started := s.started
	s.mu.Unlock()
	var errs []error
	if !started {
		errs = append(errs, errors.New("starting"))
	}
	for _, c := range checks {
		if err := c.check(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

// Handler serves /metrics, /healthz and /readyz, and /debug/pprof/ with
// Config.Profiling.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	if s.profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), CheckTimeout)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := s.Ready(ctx); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready:\n%s\n", err)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// Module gives a service's fx application its admin server, from a
// supplied Config, closed when the application stops, with the bus
// connection as its first readiness check. Add Started at the root of
// the application, after the services' modules.
var Module = fx.Module("admin",
	fx.Provide(newServer),
	fx.Invoke(func(s *Server, b *bus.Bus) { s.AddCheck("bus", BusConnected(b)) }),
)

func newServer(lc fx.Lifecycle, cfg Config, log *slog.Logger) (*Server, error) {
	s, err := New(cfg, log)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(s.Close))
	return s, nil
}

// Started marks the admin server started once every start hook before
// it has run. It must be a root option of the application, after the
// modules: fx runs the modules' invokes, and so appends their hooks,
// before the root's.
var Started = fx.Invoke(func(lc fx.Lifecycle, s *Server) { lc.Append(fx.StartHook(s.MarkStarted)) })

// BusConnected checks that b's NATS connection is up.
func BusConnected(b *bus.Bus) Check {
	return func(context.Context) error {
		if !b.NC.IsConnected() {
			return fmt.Errorf("NATS connection %s", strings.ToLower(b.NC.Status().String()))
		}
		return nil
	}
}

// LeaseKnown checks that the leases names can be read from the leases
// bucket: held by this replica, by another or by nobody, the replica
// knows which (a standby is ready: it takes over when the holder dies).
func LeaseKnown(b *bus.Bus, names ...string) Check {
	return func(ctx context.Context) error {
		kv, err := b.KV(ctx, bus.BucketLeases)
		if err != nil {
			return fmt.Errorf("leases bucket: %w", err)
		}
		for _, name := range names {
			if _, _, err := lease.Current(ctx, kv, name); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				return fmt.Errorf("read lease %s: %w", name, err)
			}
		}
		return nil
	}
}
