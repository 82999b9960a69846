// Package daemon is what every service's main shares: flags, logging, the
// bus connection as an fx module, the admin port (package admin: /metrics,
// /healthz, /readyz), and running an fx application until a signal.
package daemon

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

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
	// (`atoll bootstrap auth`), or a NATS JWT .creds file. With one the
	// service does not create the streams and buckets but waits until the
	// bootstrap (`atoll bootstrap`) has; without one it connects with no
	// user and ensures them itself (a server without permissions).
	NATSCreds string
	// Replicas is the replication of the streams and buckets the service
	// ensures (without NATSCreds only).
	Replicas int
	// ClustersFile lists member clusters (cluster-facing services only).
	ClustersFile string
	// AdminListen is the admin HTTP address (/metrics, /healthz, /readyz);
	// empty for none.
	AdminListen string
}

// DefaultAdminListen is the admin port's address when none is given.
const DefaultAdminListen = "127.0.0.1:9090"

// BusModule provides a *bus.Bus connected to Config.NATSURL, closed on stop.
var BusModule = fx.Module("bus", fx.Provide(fx.Annotate(NewBus, fx.ParamTags(``, ``, ``, `optional:"true"`))))

// NewBus connects to the bus, as the user of Config.NATSCreds when set,
// and closes it when the application stops. NATS that cannot be reached
// at start is waited for, with backoff and a log line per attempt
// (bus.Open), until it can be, or until SIGINT or SIGTERM, and so, with
// credentials, are the streams and buckets that `atoll bootstrap` creates:
// a service started before its NATS server or its bootstrap, or during a
// restart, starts late instead of exiting. The admin server, when there is
// one, is made first, so that the service answers its probes (alive, not
// ready) while it waits.
func NewBus(lc fx.Lifecycle, cfg Config, log *slog.Logger, _ *admin.Server) (*bus.Bus, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bc := bus.Config{URL: cfg.NATSURL, Name: "atoll-" + cfg.Service, Replicas: cfg.Replicas, SkipEnsure: cfg.NATSCreds != "", Logger: log}
	b, err := bus.Open(ctx, bc.WithCredentials(cfg.NATSCreds))
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(b.Close))
	return b, nil
}

// Main parses the flags, sets up logging and runs the service's fx module
// until SIGINT or SIGTERM. It is the only place that exits the process.
func Main(service, about string, needsClusters bool, modules ...fx.Option) {
	cfg := Config{Service: service}
	fs := flag.NewFlagSet(service, flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s: %s\n\nUsage: %s [flags]\n\nFlags (each also read from the environment variable shown):\n", service, about, service)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.NATSURL, "nats", env("ATOLL_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URLs, comma-separated (ATOLL_NATS_URL)")
	fs.StringVar(&cfg.NATSCreds, "nats-creds", env("ATOLL_NATS_CREDS", ""), "this service's NATS credentials file (atoll bootstrap auth); with one, the streams and buckets are left to atoll bootstrap (ATOLL_NATS_CREDS)")
	fs.IntVar(&cfg.Replicas, "replicas", 1, "replication of the streams and buckets this service ensures without --nats-creds (3 or 5 in production)")
	level := fs.String("log-level", env("ATOLL_LOG_LEVEL", "info"), "debug, info, warn or error (ATOLL_LOG_LEVEL)")
	fs.StringVar(&cfg.AdminListen, "admin-listen", env("ATOLL_ADMIN_LISTEN", DefaultAdminListen), "admin HTTP address for /metrics, /healthz and /readyz; empty for none (ATOLL_ADMIN_LISTEN)")
	if needsClusters {
		fs.StringVar(&cfg.ClustersFile, "clusters", env("ATOLL_CLUSTERS", ""), "YAML list of member clusters: name, zone, labels, kubeconfig (ATOLL_CLUSTERS)")
	}
	_ = fs.Parse(os.Args[1:])
	log := NewLogger(*level)
	slog.SetDefault(log)

	app := fx.New(
		fx.Supply(cfg, log, admin.Config{Service: service, Listen: cfg.AdminListen}),
		fx.WithLogger(func() fxevent.Logger { return &fxevent.SlogLogger{Logger: log.With("component", "fx")} }),
		admin.Module,
		BusModule,
		fx.Options(modules...),
		admin.Started,
	)
	if err := app.Err(); err != nil {
		log.Error("start", "service", service, "err", err)
		os.Exit(1)
	}
	app.Run()
}

// NewLogger returns a JSON slog logger at the named level.
func NewLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
