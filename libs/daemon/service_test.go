package daemon_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"atoll.dev/libs/daemon"
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
