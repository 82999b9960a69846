package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/daemon"
	"atoll.dev/libs/daemon/admin"
)

var quiet = slog.New(slog.DiscardHandler)

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestReadyzAnswers503UntilEveryCheckPasses(t *testing.T) {
	a, err := admin.New(admin.Config{Service: "svc", Listen: "127.0.0.1:0"}, quiet)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	var synced atomic.Bool
	a.AddCheck("caches", func(context.Context) error {
		if !synced.Load() {
			return errors.New("syncing")
		}
		return nil
	})

	code, body := get(t, a.URL()+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "not ready:\nstarting\ncaches: syncing\n", body)

	a.MarkStarted()
	code, body = get(t, a.URL()+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "not ready:\ncaches: syncing\n", body)

	synced.Store(true)
	code, body = get(t, a.URL()+"/readyz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)

	code, _ = get(t, a.URL()+"/healthz")
	assert.Equal(t, http.StatusOK, code)
}

// echo is a service as the platform's are built: Start and Stop,
// Instrument for its metrics and Ready for its readiness.
type echo struct {
	b       *bus.Bus
	metrics *bus.Metrics
	eps     *bus.Endpoints
	release chan struct{} // Start waits for it, as a service filling its caches
}

func (e *echo) Instrument(a *admin.Server) { e.metrics = a.Metrics() }

func (e *echo) Ready(context.Context) error {
	if e.eps == nil {
		return errors.New("not serving")
	}
	return nil
}

func (e *echo) Start(ctx context.Context) error {
	<-e.release
	eps, err := e.b.Serve(context.WithoutCancel(ctx), bus.ServeConfig{Name: "echo", Metrics: e.metrics, Logger: quiet},
		bus.Endpoint("say", time.Second, func(_ context.Context, req map[string]string, _ micro.Request) (any, error) {
			if req["say"] == "" {
				return nil, bus.Errorf(422, "Invalid", "say what?")
			}
			return req, nil
		}))
	e.eps = eps
	return err
}

func (e *echo) Stop() error { return e.eps.Stop() }

// TestAdminModule runs a service in an fx application the way daemon.Main
// composes one: its /readyz is 503 while it starts and 200 once it
// serves, and its /metrics counts its requests under its service label.
func TestAdminModule(t *testing.T) {
	b, err := bus.Open(t.Context(), bus.Config{StoreDir: t.TempDir(), Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	svc := &echo{b: b, release: make(chan struct{})}
	var a *admin.Server
	app := fx.New(
		fx.Supply(b, quiet, admin.Config{Service: "echo", Listen: "127.0.0.1:0"}),
		admin.Module,
		daemon.ServiceModule[*echo]("echo", func() *echo { return svc }),
		admin.Started,
		fx.Populate(&a),
		fx.NopLogger,
	)
	require.NoError(t, app.Err())
	started := make(chan error, 1)
	go func() { started <- app.Start(t.Context()) }()
	t.Cleanup(func() { _ = app.Stop(context.Background()) })

	code, body := get(t, a.URL()+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "not ready:\nstarting\necho: starting\n", body)

	close(svc.release)
	require.NoError(t, <-started)
	code, _ = get(t, a.URL()+"/readyz")
	assert.Equal(t, http.StatusOK, code)

	for _, say := range []string{`{"say":"hi"}`, `{"say":"ho"}`, `{}`} {
		_, err := b.NC.Request(bus.RequestSubject("echo", "say"), []byte(say), time.Second)
		require.NoError(t, err)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, metrics := get(t, a.URL()+"/metrics")
		for _, series := range []string{
			`atoll_micro_request_duration_seconds_count{endpoint="say",service="echo"} 3`,
			`atoll_micro_request_errors_total{code="422",endpoint="say",service="echo"} 1`,
			`go_goroutines{service="echo"}`,
		} {
			assert.True(c, strings.Contains(metrics, series), "no %s in /metrics", series)
		}
	}, 5*time.Second, 20*time.Millisecond)
}

func TestProfilingIsServedOnlyWhenAskedFor(t *testing.T) {
	for _, tc := range []struct {
		profiling bool
		want      int
	}{
		{profiling: false, want: http.StatusNotFound},
		{profiling: true, want: http.StatusOK},
	} {
		t.Run(fmt.Sprint("profiling=", tc.profiling), func(t *testing.T) {
			a, err := admin.New(admin.Config{Service: "svc", Listen: "127.0.0.1:0", Profiling: tc.profiling}, quiet)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Close(context.Background()) })
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
				code, _ := get(t, a.URL()+path)
				assert.Equal(t, tc.want, code, path)
			}
			code, _ := get(t, a.URL()+"/metrics")
			assert.Equal(t, http.StatusOK, code, "metrics either way")
		})
	}
}
