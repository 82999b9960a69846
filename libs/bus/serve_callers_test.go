package bus_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Callers are set per service (ServeConfig.Callers) or per endpoint
// (EndpointSpec.From), which wins: a request from anyone else is answered
// 403, whatever the subject permissions let through.
func TestServeCallersPerEndpoint(t *testing.T) {
	r := startAuthRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := r.as(t, bus.UserQuota, "quota")
	ok := func(context.Context, []byte, micro.Request) (any, error) { return "ok", nil }
	eps, err := q.Serve(ctx, bus.ServeConfig{Name: "quota", Callers: []string{bus.UserAdmin}, Logger: quiet},
		bus.Endpoint("reserve", 5*time.Second, ok).From(bus.UserAdmission),
		bus.Endpoint("get", 5*time.Second, ok).From(bus.UserGateway),
		bus.Endpoint("release", 5*time.Second, ok), // the service's callers
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eps.Stop() })
	conns := map[string]*nats.Conn{
		bus.UserAdmin:     r.admin.NC,
		bus.UserAdmission: r.as(t, bus.UserAdmission, "admission").NC,
		bus.UserGateway:   r.as(t, bus.UserGateway, "gateway").NC,
	}
	tests := []struct {
		caller, verb string
		want         int
	}{
		{bus.UserAdmission, "reserve", 200},
		{bus.UserAdmin, "reserve", 403}, // the admin may publish anything, and is refused all the same
		{bus.UserGateway, "get", 200},
		{bus.UserAdmin, "get", 403},
		{bus.UserAdmin, "release", 200},
		{bus.UserAdmission, "release", 403},
	}
	for _, tt := range tests {
		t.Run(tt.caller+" "+tt.verb, func(t *testing.T) {
			m, err := conns[tt.caller].RequestWithContext(ctx, bus.RequestSubject("quota", tt.verb), []byte("{}"))
			if err != nil {
				t.Fatal(err)
			}
			got := 200
			if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
				got, _ = strconv.Atoi(code)
			}
			if got != tt.want {
				t.Errorf("status %d (%s), want %d", got, m.Data, tt.want)
			}
		})
	}
}

// An endpoint made from its descriptor answers the descriptor's callers
// only, whatever ServeConfig.Callers says.
func TestDescriptorAnswersItsCallers(t *testing.T) {
	r := startAuthRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := r.as(t, bus.UserQuota, "quota")
	eps, err := q.Serve(ctx, bus.ServeConfig{Name: bus.UserQuota, Callers: []string{bus.UserAdmin}, Logger: quiet},
		bus.QuotaGet.Endpoint(5*time.Second, func(_ context.Context, req api.QuotaRelease, _ micro.Request) (*api.Ledger, error) {
			return &api.Ledger{Project: req.Project}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eps.Stop() })
	tests := []struct {
		name   string
		caller *bus.Bus
		want   int
	}{
		{bus.UserGateway, r.as(t, bus.UserGateway, "gateway"), 200},
		// The admin may publish anything, and is refused all the same.
		{bus.UserAdmin, r.admin, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := bus.QuotaGet.Call(ctx, bus.NewRequester(tt.caller.NC, bus.RequestPolicy{Attempts: 1}), api.QuotaRelease{Project: "p"})
			if got := statusOf(err); got != tt.want {
				t.Errorf("status %d (%v), want %d", got, err, tt.want)
			}
		})
	}
}

// statusOf is 200 for no error, a RemoteError's code, or 0.
func statusOf(err error) int {
	var re *bus.RemoteError
	switch {
	case err == nil:
		return 200
	case errors.As(err, &re):
		return re.Code
	}
	return 0
}
