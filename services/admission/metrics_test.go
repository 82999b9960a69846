package admission_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/services/admission"
	"atoll.dev/services/quota"
)

// TestAdminPortOfAdmission: admission is not ready until it has started,
// ready after; after a few requests its /metrics holds its
// endpoints' latencies and errors, its repair queue's reconciles (each
// after RepairGrace, so without a lag: only Add starts one), its
// lease and its quota breaker, with non-zero counts.
func TestAdminPortOfAdmission(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	b, err := bus.Open(t.Context(), bus.Config{StoreDir: t.TempDir(), Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	q := quota.New(b, quiet, quota.Ample())
	require.NoError(t, q.Start(t.Context()))
	t.Cleanup(func() { _ = q.Stop() })

	// As daemon.Run composes it: the admin port, the service's module.
	var adm *admin.Server
	app := fx.New(fx.NopLogger,
		fx.Supply(b, quiet, admin.Config{Service: "admission", Listen: "127.0.0.1:0"}),
		admin.Module, admission.Module, admin.Started,
		fx.Populate(&adm))
	require.NoError(t, app.Err())

	// /readyz answers 503 while adm.Ready fails, 200 once it passes.
	assert.EqualError(t, adm.Ready(t.Context()), "starting\nadmission: starting")
	require.NoError(t, app.Start(t.Context()))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	assert.NoError(t, adm.Ready(t.Context()))

	for i := range 3 {
		doc := fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"web-%d"},"spec":{"replicas":1,"template":{"containers":[{"name":"a","image":"nginx"}]}}}`, i)
		if _, eb := call(t, b, bus.AdmissionSubmit, []byte(doc), nil); eb != nil {
			t.Fatalf("submit: %+v", eb)
		}
	}
	if _, eb := call(t, b, bus.AdmissionOperate, []byte(`[]`), nil); eb == nil || eb.Code != "BadRequest" {
		t.Fatalf("operate with an array: got %+v, want BadRequest", eb)
	}

	const svc = `service="admission"`
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := admin.Scrape(t.Context(), adm.URL())
		require.NoError(c, err)
		for _, series := range []struct {
			name string
			want func(float64) bool
		}{
			{`atoll_micro_request_duration_seconds{endpoint="submit",` + svc + `}`, eq(3)},
			{`atoll_micro_request_duration_seconds{endpoint="operate",` + svc + `}`, eq(1)},
			{`atoll_micro_request_errors_total{code="400",endpoint="operate",` + svc + `}`, eq(1)},
			{`atoll_lease_held{lease="admission-repair",` + svc + `}`, eq(1)},
			{`atoll_reconcile_duration_seconds{queue="repair",` + svc + `}`, positive},
			{`atoll_queue_depth{queue="repair",` + svc + `}`, atLeast0},
			{`atoll_breaker_state{` + svc + `,target="quota"}`, eq(0)},
		} {
			v, ok := got[series.name]
			assert.True(c, ok && series.want(v), "%s = %v (present %v)", series.name, v, ok)
		}
	}, 15*time.Second, 50*time.Millisecond)
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
func positive(v float64) bool            { return v > 0 }
func atLeast0(v float64) bool            { return v >= 0 }
