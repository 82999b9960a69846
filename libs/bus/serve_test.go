package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// order is a request with the shapes a decoder can trip on.
type order struct {
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
	Options  struct {
		Colors []string `json:"colors"`
	} `json:"options"`
}

// serveOrders serves "orders.place": item "conflict" is refused with
// 409, "boom" fails with a plain error, "wait" blocks until its context
// ends and returns that error; others are echoed.
func serveOrders(t *testing.T, ctx context.Context, b *bus.Bus, m *bus.Metrics, timeout time.Duration, entered chan<- struct{}) *bus.Endpoints {
	t.Helper()
	eps, err := b.Serve(ctx, bus.ServeConfig{Name: "orders", Metrics: m, Logger: quiet},
		bus.Endpoint("place", timeout, func(ctx context.Context, o order, _ micro.Request) (any, error) {
			switch o.Item {
			case "conflict":
				return nil, bus.Errorf(api.StatusConflict, "Conflict", "item %s is taken", o.Item)
			case "boom":
				return nil, errors.New("disk on fire")
			case "wait":
				entered <- struct{}{}
				<-ctx.Done()
				return nil, fmt.Errorf("waited: %w", ctx.Err())
			}
			return o, nil
		}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = eps.Stop() })
	return eps
}

// place sends one order and returns the reply's code (200 for success)
// and its error body.
func place(t *testing.T, b *bus.Bus, body string) (int, api.ErrorBody) {
	t.Helper()
	msg, err := b.NC.RequestMsg(&nats.Msg{Subject: bus.RequestSubject("orders", "place"), Data: []byte(body)}, 5*time.Second)
	require.NoError(t, err)
	code := msg.Header.Get(micro.ErrorCodeHeader)
	if code == "" {
		return 200, api.ErrorBody{}
	}
	var eb api.ErrorBody
	require.NoError(t, json.Unmarshal(msg.Data, &eb), "error body %q", msg.Data)
	var n int
	_, _ = fmt.Sscan(code, &n)
	return n, eb
}

// goTypeName matches what encoding/json's errors say of Go types.
var goTypeName = regexp.MustCompile(`Go (value|struct)|bus_test|\border\b|\bint\b|\[\]|struct`)

func TestEndpointRefusesMalformedRequestsInJSONTerms(t *testing.T) {
	b := openBus(t)
	serveOrders(t, t.Context(), b, nil, time.Second, nil)
	tests := []struct {
		name, body, want string
	}{
		{"array for the object", `[]`, "malformed request: got an array, want an object"},
		{"string for a number", `{"item":"x","quantity":"two"}`, "malformed request: field quantity: got a string, want an integer"},
		{"string for an array, nested", `{"options":{"colors":"red"}}`, "malformed request: field options.colors: got a string, want an array"},
		{"unknown field", `{"item":"x","colour":"red"}`, `malformed request: unknown field "colour"`},
		{"syntax", `{"item":}`, "malformed request: invalid JSON at offset 9: invalid character '}' looking for beginning of value"},
		{"truncated", `{"item":"x"`, "malformed request: the JSON ends early"},
		{"empty", ``, "malformed request: empty body, want an object"},
		{"trailing data", `{"item":"x"} {}`, "malformed request: data after the JSON value at offset 14"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, eb := place(t, b, tt.body)
			assert.Equal(t, api.StatusBadRequest, code)
			if diff := cmp.Diff(api.ErrorBody{Code: "BadRequest", Message: tt.want}, eb); diff != "" {
				t.Errorf("error body (-want +got):\n%s", diff)
			}
			assert.NotRegexp(t, goTypeName, eb.Message)
		})
	}
}

func TestEndpointMapsErrorsToReplies(t *testing.T) {
	b := openBus(t)
	serveOrders(t, t.Context(), b, nil, time.Second, nil)
	tests := []struct {
		item     string
		wantCode int
		wantBody api.ErrorBody
	}{
		{"tea", 200, api.ErrorBody{}},
		{"conflict", api.StatusConflict, api.ErrorBody{Code: "Conflict", Message: "item conflict is taken"}},
		{"boom", api.StatusInternal, api.ErrorBody{Code: "Internal", Message: "disk on fire"}},
	}
	for _, tt := range tests {
		t.Run(tt.item, func(t *testing.T) {
			code, eb := place(t, b, `{"item":"`+tt.item+`"}`)
			assert.Equal(t, tt.wantCode, code)
			assert.Equal(t, tt.wantBody, eb)
		})
	}
}

// TestEndpointContextEndsWithTheService: a request in flight sees its
// context cancelled when the service's lifetime context ends, and its
// caller gets 503; an endpoint that runs past its timeout answers 503 too.
func TestEndpointContextEndsWithTheService(t *testing.T) {
	b := openBus(t)
	t.Run("service context ends", func(t *testing.T) {
		svcCtx, stop := context.WithCancel(t.Context())
		entered := make(chan struct{}, 1)
		serveOrders(t, svcCtx, b, nil, time.Minute, entered)
		type reply struct {
			code int
			body api.ErrorBody
		}
		done := make(chan reply, 1)
		go func() {
			code, eb := place(t, b, `{"item":"wait"}`)
			done <- reply{code, eb}
		}()
		<-entered
		start := time.Now()
		stop()
		select {
		case r := <-done:
			assert.Equal(t, api.StatusUnavailable, r.code)
			assert.Equal(t, api.ErrorBody{Code: "Unavailable", Message: "service stopping"}, r.body)
			assert.Less(t, time.Since(start), 2*time.Second)
		case <-time.After(5 * time.Second):
			t.Fatal("the handler's context did not end with the service's")
		}
	})
	t.Run("Stop", func(t *testing.T) {
		entered := make(chan struct{}, 1)
		eps := serveOrders(t, t.Context(), b, nil, time.Minute, entered)
		done := make(chan int, 1)
		go func() {
			code, _ := place(t, b, `{"item":"wait"}`)
			done <- code
		}()
		<-entered
		require.NoError(t, eps.Stop()) // returns once the handler has
		assert.Equal(t, api.StatusUnavailable, <-done)
	})
	t.Run("timeout", func(t *testing.T) {
		entered := make(chan struct{}, 1)
		serveOrders(t, t.Context(), b, nil, 50*time.Millisecond, entered)
		code, eb := place(t, b, `{"item":"wait"}`)
		<-entered
		assert.Equal(t, api.StatusUnavailable, code)
		assert.Equal(t, "Timeout", eb.Code)
	})
}

func TestEndpointRecordsMetrics(t *testing.T) {
	b := openBus(t)
	reg := prometheus.NewRegistry()
	serveOrders(t, t.Context(), b, bus.NewMetrics(reg), time.Second, nil)
	for _, body := range []string{`{"item":"tea"}`, `{"item":"tea"}`, `[]`, `{"item":"conflict"}`, `{"item":"boom"}`} {
		place(t, b, body)
	}
	// The reply goes out before the metrics are recorded.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := gather(c, reg)
		assert.Equal(c, map[string]float64{
			`atoll_micro_request_duration_seconds{endpoint="place"}`:        5,
			`atoll_micro_request_errors_total{code="400",endpoint="place"}`: 1,
			`atoll_micro_request_errors_total{code="409",endpoint="place"}`: 1,
			`atoll_micro_request_errors_total{code="500",endpoint="place"}`: 1,
		}, got)
	}, 5*time.Second, 10*time.Millisecond)
}

func TestQueueRecordsReconcilesAndLag(t *testing.T) {
	reg := prometheus.NewRegistry()
	q := bus.NewQueue(bus.Instrumented(bus.NewMetrics(reg), "work"))
	failed := false
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	q.Add("a")
	q.Add("a") // deduplicated while it waits
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		q.Run(ctx, 1, quiet, func(context.Context, string) error {
			if !failed {
				failed = true
				return errors.New("not yet")
			}
			close(done)
			return nil
		})
	}()
	defer func() { cancel(); <-ran }()
	<-done
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := gather(c, reg)
		assert.Equal(c, 2.0, got[`atoll_reconcile_duration_seconds{queue="work"}`], "reconciles")
		assert.Equal(c, 1.0, got[`atoll_reconcile_errors_total{queue="work"}`], "failures")
		assert.Equal(c, 1.0, got[`atoll_reconcile_lag_seconds{queue="work"}`], "one change, caught up once")
		assert.Contains(c, got, `atoll_queue_depth{queue="work"}`)
	}, 5*time.Second, 10*time.Millisecond)
}

func TestBreakerStateIsReported(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := bus.NewBreakerSet[struct{}](bus.BreakerPolicy{ConsecutiveFailures: 1, OpenFor: time.Hour, Logger: quiet})
	s.Instrument(bus.NewMetrics(reg))
	_, _ = s.Execute("sick", func() (struct{}, error) { return struct{}{}, errors.New("down") })
	_, _ = s.Execute("well", func() (struct{}, error) { return struct{}{}, nil })
	got := gather(t, reg)
	assert.Equal(t, 2.0, got[`atoll_breaker_state{target="sick"}`], "open")
	assert.Equal(t, 0.0, got[`atoll_breaker_state{target="well"}`], "closed")
}

var quiet = slog.New(slog.DiscardHandler)

// gather returns each series of reg by name and labels: a counter's or
// gauge's value, a histogram's sample count.
func gather(t assert.TestingT, reg *prometheus.Registry) map[string]float64 {
	mfs, err := reg.Gather()
	assert.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Counter != nil:
		return m.Counter.GetValue()
	default:
		return m.Gauge.GetValue()
	}
}
