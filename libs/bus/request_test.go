package bus_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
)

// endpoint starts a micro service whose handler answers with the current
// value of *code (0: success) and counts calls.
func endpoint(t *testing.T, b *bus.Bus, name string, code *atomic.Int32, calls *atomic.Int32) string {
	t.Helper()
	subject := bus.RequestSubject(name, "do")
	svc, err := micro.AddService(b.NC, micro.Config{Name: name, Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	err = svc.AddEndpoint("do", micro.HandlerFunc(func(r micro.Request) {
		calls.Add(1)
		switch c := code.Load(); c {
		case 0:
			_ = r.Respond([]byte("ok"))
		default:
			_ = r.Error(itoa(c), "induced", nil)
		}
	}), micro.WithEndpointSubject(subject))
	if err != nil {
		t.Fatal(err)
	}
	return subject
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func TestBreakerOpensPerTargetAndHalfOpens(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	var goodCode, badCode, goodCalls, badCalls atomic.Int32
	badCode.Store(503)
	good := endpoint(t, b, "good", &goodCode, &goodCalls)
	bad := endpoint(t, b, "bad", &badCode, &badCalls)

	const openFor = 500 * time.Millisecond
	r := bus.NewRequester(b.NC, bus.RequestPolicy{
		Timeout:   time.Second,
		Attempts:  1,
		BaseDelay: time.Millisecond,
		Breaker:   bus.BreakerPolicy{ConsecutiveFailures: 3, OpenFor: openFor},
	})
	tripping := time.Now() // before the failure that opens the breaker
	for i := 0; i < 3; i++ {
		_, err := r.Request(ctx, "bad", bad, nil)
		var re *bus.RemoteError
		if !errors.As(err, &re) || re.Code != 503 {
			t.Fatalf("call %d: got %v, want a 503 RemoteError", i, err)
		}
	}
	if st := r.Breakers().State("bad"); st != gobreaker.StateOpen {
		t.Fatalf("bad breaker %v after 3 failures, want open", st)
	}
	// Open: fails fast without reaching the service.
	before := badCalls.Load()
	if _, err := r.Request(ctx, "bad", bad, nil); !errors.Is(err, gobreaker.ErrOpenState) {
		t.Fatalf("got %v, want ErrOpenState", err)
	}
	if badCalls.Load() != before {
		t.Error("an open breaker let a call through")
	}
	// Other targets are untouched.
	for i := 0; i < 5; i++ {
		if out, err := r.Request(ctx, "good", good, nil); err != nil || string(out) != "ok" {
			t.Fatalf("good target: %q %v", out, err)
		}
	}
	if st := r.Breakers().State("good"); st != gobreaker.StateClosed {
		t.Errorf("good breaker %v, want closed", st)
	}
	// After OpenFor the breaker half-opens, not before; a successful probe closes it.
	require.Eventually(t, func() bool { return r.Breakers().State("bad") == gobreaker.StateHalfOpen },
		openFor+5*time.Second, 5*time.Millisecond, "bad breaker half-open after OpenFor")
	if waited := time.Since(tripping); waited < openFor {
		t.Fatalf("bad breaker half-open %v after it opened, want at least OpenFor %v", waited, openFor)
	}
	badCode.Store(0)
	if _, err := r.Request(ctx, "bad", bad, nil); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if st := r.Breakers().State("bad"); st != gobreaker.StateClosed {
		t.Errorf("bad breaker %v after successful probe, want closed", st)
	}
}

func TestFailureClassification(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	var code, calls atomic.Int32
	code.Store(422)
	subject := endpoint(t, b, "validator", &code, &calls)
	r := bus.NewRequester(b.NC, bus.RequestPolicy{
		Timeout:   200 * time.Millisecond,
		Attempts:  3,
		BaseDelay: time.Millisecond,
		Breaker:   bus.BreakerPolicy{ConsecutiveFailures: 2, OpenFor: time.Minute},
	})
	// A 4xx answer is the target working: not retried, never opens the breaker.
	for i := 0; i < 5; i++ {
		if _, err := r.Request(ctx, "validator", subject, nil); err == nil {
			t.Fatal("want a 422 error")
		}
	}
	if n := calls.Load(); n != 5 {
		t.Errorf("4xx was retried: %d calls for 5 requests", n)
	}
	if st := r.Breakers().State("validator"); st != gobreaker.StateClosed {
		t.Errorf("breaker %v after 4xx answers, want closed", st)
	}
	// No responders is a target failure: retried, then the breaker opens.
	_, err := r.Request(ctx, "ghost", bus.RequestSubject("ghost", "do"), nil)
	if err == nil {
		t.Fatal("request to a subject without responders succeeded")
	}
	if st := r.Breakers().State("ghost"); st != gobreaker.StateOpen {
		t.Errorf("ghost breaker %v, want open", st)
	}
	// A caller that gives up does not count against the target.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Request(cctx, "validator2", subject, nil); err == nil {
		t.Fatal("cancelled call succeeded")
	}
	if c := r.Breakers().For("validator2").Counts(); c.TotalFailures != 0 {
		t.Errorf("cancelled call counted as failure: %+v", c)
	}
}
