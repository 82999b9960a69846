package daemon_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"atoll.dev/libs/daemon"
	"atoll.dev/libs/daemon/admin"
)

// Three services with the three Stop shapes ServiceModule takes, and one
// with none.
type (
	stopPlain struct{ calls *[]string }
	stopErr   struct{ calls *[]string }
	stopCtx   struct{ calls *[]string }
	noStop    struct{}
)

func (s stopPlain) Start(context.Context) error { *s.calls = append(*s.calls, "start"); return nil }
func (s stopPlain) Stop()                       { *s.calls = append(*s.calls, "stop") }
func (s stopErr) Start(context.Context) error   { *s.calls = append(*s.calls, "start"); return nil }
func (s stopErr) Stop() error                   { *s.calls = append(*s.calls, "stop"); return nil }
func (s stopCtx) Start(context.Context) error   { *s.calls = append(*s.calls, "start"); return nil }
func (s stopCtx) Stop(context.Context) error    { *s.calls = append(*s.calls, "stop"); return nil }
func (noStop) Start(context.Context) error      { return nil }

func TestServiceModuleRunsStartAndStop(t *testing.T) {
	for _, tc := range []struct {
		name   string
		module func(calls *[]string) fx.Option
	}{
		{"Stop()", func(c *[]string) fx.Option {
			return daemon.ServiceModule[stopPlain]("svc", func() stopPlain { return stopPlain{c} })
		}},
		{"Stop() error", func(c *[]string) fx.Option {
			return daemon.ServiceModule[stopErr]("svc", func() stopErr { return stopErr{c} })
		}},
		{"Stop(ctx) error", func(c *[]string) fx.Option {
			return daemon.ServiceModule[stopCtx]("svc", func() stopCtx { return stopCtx{c} })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			app := fx.New(fx.NopLogger, tc.module(&calls))
			require.NoError(t, app.Err())
			require.NoError(t, app.Start(t.Context()))
			require.NoError(t, app.Stop(t.Context()))
			assert.Equal(t, []string{"start", "stop"}, calls)
		})
	}
}

func TestServiceModuleRefusesAServiceWithoutStop(t *testing.T) {
	app := fx.New(fx.NopLogger, daemon.ServiceModule[noStop]("svc", func() noStop { return noStop{} }))
	assert.ErrorContains(t, app.Err(), "has no Stop method")
}

// filling is a daemon.Filler whose caches fill when the test says.
type filling struct{ full *bool }

func (filling) Start(context.Context) error { return nil }
func (filling) Stop()                       {}
func (f filling) Filled() bool              { return *f.full }

// TestServiceModuleExportsFilled: a Filler's Filled is the gauge
// atoll_caches_filled, 0 until it has started and filled, then 1.
func TestServiceModuleExportsFilled(t *testing.T) {
	a, err := admin.New(admin.Config{Service: "svc"}, nil)
	require.NoError(t, err)
	full := false
	app := fx.New(fx.NopLogger, fx.Supply(a), daemon.ServiceModule[filling]("svc", func() filling { return filling{&full} }))
	require.NoError(t, app.Err())
	gauge := func() float64 {
		mfs, err := a.Registry().Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "atoll_caches_filled" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no atoll_caches_filled")
		return -1
	}
	full = true
	assert.Equal(t, 0.0, gauge(), "before Start")
	full = false
	require.NoError(t, app.Start(t.Context()))
	assert.Equal(t, 0.0, gauge(), "filling")
	full = true
	assert.Equal(t, 1.0, gauge(), "filled")
	require.NoError(t, app.Stop(t.Context()))
}
