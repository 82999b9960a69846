// Package daemon is what every service's main shares: flags, logging, the
// bus connection as an fx module, the admin port (package admin: /metrics,
// /healthz, /readyz), and running an fx application until a signal.
//
// # Configuration a container can use
//
// Every setting is a flag and an environment variable (FlagSet): the
// shared ones (Config: -nats, -nats-creds, -replicas, -admin-listen,
// -log-level, -clusters) and each service's own, which its main defines in
// Command.Flags. `-h` names every variable; a flag given wins over its
// variable, a non-empty variable over the default, and a variable that
// does not parse is refused (exit 2) rather than ignored. Command.Validate
// refuses a configuration the service cannot work with before anything
// starts (the gateway without a token source).
//
// # One line when started
//
// fx's own log of every provide, invoke and hook is kept for -log-level
// debug; otherwise a service logs one line when it has started (FxLogger)
// and, after that, only what happens.
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/daemon/admin"
)

// Config is the process configuration common to every service.
type Config struct {
	// Service is the service's name, used for the NATS connection and logs.
	Service string
	// NATSURL is the bus (comma-separated URLs).
	NATSURL string
	// NATSCreds is the service's NATS credentials file: its own user's
	// (`atoll-admin bootstrap auth`), or a NATS JWT .creds file. With one the
	// service does not create the streams and buckets but waits until the
	// bootstrap (`atoll-admin bootstrap`) has; without one it connects with no
	// user and ensures them itself (a server without permissions), which
	// it does only with InsecureDev.
	NATSCreds string
	// InsecureDev lets the service start without NATSCreds, on a NATS
	// server without users and permissions: for development only. Without
	// it, a service with no credentials refuses to start (ErrNoCredentials)
	// rather than run with no caller checks at all.
	InsecureDev bool
	// NATSCA is the PEM CA file the NATS servers' certificates are
	// verified with; with it the service connects over TLS (bus.Config.CAFile).
	NATSCA string
	// Replicas is the replication of the streams and buckets the service
	// ensures (without NATSCreds only).
	Replicas int
	// ClustersFile lists member clusters (cluster-facing services only).
	ClustersFile string
	// AdminListen is the admin HTTP address (/metrics, /healthz, /readyz);
	// empty for none.
	AdminListen string
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// Profiling serves /debug/pprof/ on the admin port (admin.Config).
	Profiling bool
}

// DefaultAdminListen is the admin port's address when none is given.
const DefaultAdminListen = "127.0.0.1:9090"

// BusModule provides a *bus.Bus connected to Config.NATSURL, closed on stop.
var BusModule = fx.Module("bus", fx.Provide(fx.Annotate(NewBus, fx.ParamTags(``, ``, ``, `optional:"true"`))))

// NewBus connects to the bus, as the user of Config.NATSCreds when set,
// and closes it when the application stops. NATS that cannot be reached
// at start is waited for, with backoff and a log line per attempt
// (bus.Open), until it can be, or until SIGINT or SIGTERM, and so, with
// credentials, are the streams and buckets that `atoll-admin bootstrap` creates:
// a service started before its NATS server or its bootstrap, or during a
// restart, starts late instead of exiting. The admin server, when there is
// one, is made first, so that the service answers its probes (alive, not
// ready) while it waits.
//
// Without credentials it refuses to start unless Config.InsecureDev says
// to. It exports the fill of the streams and buckets the service uses
// (bus.StreamFill) on the admin server's registry.
func NewBus(lc fx.Lifecycle, cfg Config, log *slog.Logger, a *admin.Server) (*bus.Bus, error) {
	if cfg.NATSCreds == "" && !cfg.InsecureDev {
		return nil, ErrNoCredentials
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bc := bus.Config{URL: cfg.NATSURL, Name: "atoll-" + cfg.Service, Replicas: cfg.Replicas, SkipEnsure: cfg.NATSCreds != "", CAFile: cfg.NATSCA, Logger: log}
	b, err := bus.Open(ctx, bc.WithCredentials(cfg.NATSCreds))
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(b.Close))
	if a != nil {
		if err := a.Registerer().Register(b.StreamFill(bus.OwnStreams(b.User())...)); err != nil {
			return nil, fmt.Errorf("stream fill metrics: %w", err)
		}
	}
	return b, nil
}

// ErrNoCredentials refuses to start a service that has no NATS
// credentials and was not started with --insecure-dev.
var ErrNoCredentials = errors.New("no NATS credentials (--nats-creds, ATOLL_NATS_CREDS): a service without them runs with no permissions and no caller checks; pass --insecure-dev (ATOLL_INSECURE_DEV=true) to run so, for development only")

// Version is the build's version, set by the image build
// (-ldflags "-X atoll.dev/libs/daemon.Version=v1.2.3"); `-version` prints it
// and the start line logs it.
var Version = "dev"

// Command describes a service's command line: the flags every service
// shares (Config's) and the service's own.
type Command struct {
	// Service is the service's name; About, a line saying what it does.
	Service, About string
	// Clusters adds --clusters (ATOLL_CLUSTERS): cluster-facing services.
	Clusters bool
	// Flags defines the service's own flags, each with its environment
	// variable (ATOLL_<SERVICE>_<SETTING>).
	Flags func(*FlagSet)
	// Validate, when set, runs after parsing and before anything starts:
	// a configuration the service cannot work with is refused here, with
	// a message naming the flag and its variable, instead of at the first
	// request.
	Validate func() error
}

// Parse reads the command line args and the environment getenv into the
// shared Config and the command's own flags. It returns flag.ErrHelp
// after writing the help text to out when asked for -h.
func Parse(cmd Command, args []string, getenv func(string) string, out io.Writer) (Config, error) {
	cfg := Config{Service: cmd.Service, LogLevel: "info"}
	f := newFlagSet(cmd.Service, getenv)
	defineCommon(f, &cfg, cmd.Clusters)
	if cmd.Flags != nil {
		cmd.Flags(f)
	}
	version := false
	f.fs.BoolVar(&version, "version", false, "print the version and exit")
	if err := f.parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.usage(out, cmd.Service, cmd.About)
		}
		return cfg, err
	}
	if version {
		fmt.Fprintf(out, "%s %s\n", cmd.Service, Version)
		return cfg, ErrVersion
	}
	if cmd.Validate != nil {
		if err := cmd.Validate(); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// ErrVersion is Parse's answer to -version, after printing it.
var ErrVersion = errors.New("version printed")

// defineCommon defines the flags of Config.
func defineCommon(f *FlagSet, cfg *Config, clusters bool) {
	f.String(&cfg.NATSURL, "nats", "ATOLL_NATS_URL", "nats://127.0.0.1:4222", "NATS server URLs, comma-separated")
	f.String(&cfg.NATSCreds, "nats-creds", "ATOLL_NATS_CREDS", "", "this service's NATS credentials file (atoll-admin bootstrap auth); with one, the streams and buckets are left to atoll-admin bootstrap")
	f.Bool(&cfg.InsecureDev, "insecure-dev", "ATOLL_INSECURE_DEV", false, "start without --nats-creds, on a NATS server with no users or permissions: development only")
	f.String(&cfg.NATSCA, "nats-ca", "ATOLL_NATS_CA", "", "PEM CA file to verify the NATS servers' certificates with: connect over TLS")
	f.Int(&cfg.Replicas, "replicas", "ATOLL_NATS_REPLICAS", 1, "replication of the streams and buckets this service ensures without --nats-creds (3 or 5 in production)")
	f.String(&cfg.LogLevel, "log-level", "ATOLL_LOG_LEVEL", "info", "debug, info, warn or error (debug also logs the dependency injection's every step)")
	f.String(&cfg.AdminListen, "admin-listen", "ATOLL_ADMIN_LISTEN", DefaultAdminListen, "admin HTTP address for /metrics, /healthz and /readyz; empty for none")
	f.Bool(&cfg.Profiling, "profiling", "ATOLL_PROFILING", false, "serve the Go runtime's profiles at /debug/pprof/ on the admin port (CPU, heap, goroutines); keep that port private")
	if clusters {
		f.String(&cfg.ClustersFile, "clusters", "ATOLL_CLUSTERS", "", "YAML list of member clusters: name, zone, labels, kubeconfig")
	}
}

// Main runs a service that has only the shared flags; see Run.
func Main(service, about string, needsClusters bool, modules ...fx.Option) {
	Run(Command{Service: service, About: about, Clusters: needsClusters}, modules...)
}

// Run parses the command line (Parse), sets up logging and runs the
// service's fx modules until SIGINT or SIGTERM. It is the only place that
// exits the process: 0 after -h or -version, 2 on a bad command line or
// environment, 1 when the service cannot start. A service logs one line
// when it has started (fx's own steps only at -log-level debug).
func Run(cmd Command, modules ...fx.Option) {
	cfg, err := Parse(cmd, os.Args[1:], os.Getenv, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp), errors.Is(err, ErrVersion):
		os.Exit(0)
	case err != nil:
		fmt.Fprintf(os.Stderr, "%s: %v\n(%s -h lists the flags and their environment variables)\n", cmd.Service, err, cmd.Service)
		os.Exit(2)
	}
	log := NewLogger(cfg.LogLevel)
	slog.SetDefault(log)

	app := fx.New(
		fx.StartTimeout(StartTimeout),
		fx.Supply(cfg, log, admin.Config{Service: cmd.Service, Listen: cfg.AdminListen, Profiling: cfg.Profiling}),
		fx.WithLogger(func() fxevent.Logger { return FxLogger(log, cfg) }),
		admin.Module,
		BusModule,
		fx.Options(modules...),
		admin.Started,
	)
	if err := app.Err(); err != nil {
		log.Error("cannot start", "service", cmd.Service, "err", err)
		os.Exit(1)
	}
	app.Run()
}

// StartTimeout bounds a service's start hooks (fx's default is 15 s). A
// service's Start waits for its mirrors to fill, which grows with the
// region: in BenchmarkRegionScale at 30,000 workloads on a loaded 2-core
// machine the propagator's took longer than 15 s, and fx's default made it
// exit with status 1 and start over from nothing, again and again. Until
// Start returns, the process is alive (/healthz) and not ready (/readyz):
// what tells a slow start from a dead one is the readiness probe, not
// this bound.
const StartTimeout = 5 * time.Minute

// NewLogger returns a JSON slog logger at the named level.
func NewLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
