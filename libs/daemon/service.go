package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"atoll.dev/libs/daemon/admin"
)

// Service is what ServiceModule runs: a value that starts (opens its
// buckets, starts its loops) and stops with one of the shapes of
// Stopper. Start must not return before the service can do its work or
// has failed; Stop must return only once every goroutine the service
// started has ended.
type Service interface {
	Start(ctx context.Context) error
}

// Stopper is the stop half of a Service, in one of the three shapes the
// services have: Stop(), Stop() error or Stop(context.Context) error.
type Stopper interface {
	Stop()
}

// Instrumented is a Service that takes its metrics from the admin
// server, before it starts.
type Instrumented interface {
	Instrument(*admin.Server)
}

// Readier is a Service with a readiness check of its own (its mirrors
// full, its leases' state known). ServiceModule calls it only between a
// successful Start and Stop.
type Readier interface {
	Ready(context.Context) error
}

// Filler is a Service whose readiness does not wait for its caches to
// fill (they fill behind it): Filled says when they have. ServiceModule
// exports it as the gauge atoll_caches_filled (1 once filled, 0 before),
// what tells a replica that can take over at once from one that is ready
// and still loading.
type Filler interface {
	Filled() bool
}

// ErrStarting is a service's readiness before its Start has returned
// (or after its Stop has begun).
var ErrStarting = errors.New("starting")

// ServiceModule is a service's fx module, the one lifecycle every service
// shares (temporal's service/*/fx.go on a shared module): ctor provides
// T (fx.Provide, so it may be fx.Annotated), T's Start and Stop become
// the application's start and stop hooks (fx.StartStopHook), and, when
// the application has an admin server (admin.Module), T's Instrument
// gets the server before anything starts and the server's readiness
// check name answers ErrStarting until Start has returned, then T's own
// Ready when it has one. opts are added to the module (a service's own
// provides).
func ServiceModule[T Service](name string, ctor any, opts ...fx.Option) fx.Option {
	return fx.Module(name,
		fx.Provide(ctor),
		fx.Invoke(fx.Annotate(func(lc fx.Lifecycle, t T, a *admin.Server) error {
			stop, err := stopOf(t)
			if err != nil {
				return fmt.Errorf("service %s: %w", name, err)
			}
			var started atomic.Bool
			lc.Append(fx.StartStopHook(
				func(ctx context.Context) error {
					if err := t.Start(ctx); err != nil {
						return err
					}
					started.Store(true)
					return nil
				},
				func(ctx context.Context) error {
					started.Store(false)
					return stop(ctx)
				}))
			if a == nil {
				return nil
			}
			if i, ok := any(t).(Instrumented); ok {
				i.Instrument(a)
			}
			if f, ok := any(t).(Filler); ok {
				if err := a.Registerer().Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
					Name: "atoll_caches_filled",
					Help: "1 once the replica's caches are full (it can take over at once), 0 while they fill behind its readiness.",
				}, func() float64 {
					if started.Load() && f.Filled() {
						return 1
					}
					return 0
				})); err != nil {
					return fmt.Errorf("service %s: %w", name, err)
				}
			}
			r, _ := any(t).(Readier)
			a.AddCheck(name, func(ctx context.Context) error {
				if !started.Load() {
					return ErrStarting
				}
				if r != nil {
					return r.Ready(ctx)
				}
				return nil
			})
			return nil
		}, fx.ParamTags(``, ``, `optional:"true"`))),
		fx.Options(opts...),
	)
}

// stopOf returns t's Stop as a stop hook, whichever of Stopper's shapes
// it has.
func stopOf(t any) (func(context.Context) error, error) {
	switch s := t.(type) {
	case interface{ Stop(context.Context) error }:
		return s.Stop, nil
	case interface{ Stop() error }:
		return func(context.Context) error { return s.Stop() }, nil
	case Stopper:
		return func(context.Context) error { s.Stop(); return nil }, nil
	}
	return nil, fmt.Errorf("%T has no Stop method", t)
}
