package daemon

import (
	"context"
	"log/slog"

	"go.uber.org/fx/fxevent"
)

// FxLogger is the fx event logger of a service: at -log-level debug, every
// step of fx (each provide, invoke and hook, a hundred lines); otherwise
// only what an operator needs: one line when the service has started
// (its version, NATS URL, user and admin address), one when it stops, and
// every step that failed.
func FxLogger(log *slog.Logger, cfg Config) fxevent.Logger {
	if log.Enabled(context.Background(), slog.LevelDebug) {
		return &fxevent.SlogLogger{Logger: log.With("component", "fx")}
	}
	return &quietFx{log: log, cfg: cfg}
}

type quietFx struct {
	log *slog.Logger
	cfg Config
}

func (q *quietFx) LogEvent(event fxevent.Event) {
	fail := func(step string, err error, args ...any) {
		if err != nil {
			q.log.Error("fx: "+step+" failed", append(args, "service", q.cfg.Service, "err", err)...)
		}
	}
	switch e := event.(type) {
	case *fxevent.Started:
		if e.Err != nil {
			fail("start", e.Err)
			return
		}
		creds := "none (no NATS permissions: ensures the topology itself)" //nolint:gosec // G101: a description for the log, not a credential
		if q.cfg.NATSCreds != "" {
			creds = q.cfg.NATSCreds
		}
		args := []any{"service", q.cfg.Service, "version", Version, "nats", q.cfg.NATSURL, "nats_creds", creds, "admin", q.cfg.AdminListen}
		if q.cfg.ClustersFile != "" {
			args = append(args, "clusters", q.cfg.ClustersFile)
		}
		q.log.Info("started", args...)
	case *fxevent.Stopping:
		q.log.Info("stopping", "service", q.cfg.Service, "signal", e.Signal.String())
	case *fxevent.Stopped:
		fail("stop", e.Err)
	case *fxevent.OnStartExecuted:
		fail("start hook", e.Err, "callee", e.FunctionName)
	case *fxevent.OnStopExecuted:
		fail("stop hook", e.Err, "callee", e.FunctionName)
	case *fxevent.Provided:
		fail("provide", e.Err, "constructor", e.ConstructorName)
	case *fxevent.Supplied:
		fail("supply", e.Err, "type", e.TypeName)
	case *fxevent.Decorated:
		fail("decorate", e.Err, "decorator", e.DecoratorName)
	case *fxevent.Replaced:
		fail("replace", e.Err)
	case *fxevent.Invoked:
		fail("invoke", e.Err, "function", e.FunctionName)
	case *fxevent.Run:
		fail("run", e.Err, "function", e.Name)
	case *fxevent.RollingBack:
		fail("start, rolling back", e.StartErr)
	case *fxevent.RolledBack:
		fail("roll back", e.Err)
	case *fxevent.LoggerInitialized:
		fail("logger", e.Err)
	}
}
