package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
)

// A call in flight when the connection drops ends then under
// UntilDisconnected, with ErrBusUnavailable as the cause, rather than
// waiting out its deadline; a context taken after the return is live, and
// a Key-Value write under it succeeds.
func TestUntilDisconnectedEndsACallLostWithTheServer(t *testing.T) {
	srv, restart, server, client := serverAndTwoClients(t)
	subject := bus.RequestSubject("svc", "hang")
	received := make(chan struct{}, 1)
	// Received and never answered: the server goes away with the reply.
	sub, err := server.NC.Subscribe(subject, func(*nats.Msg) { received <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := server.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx, stop := client.UntilDisconnected(deadline)
	defer stop()
	done := make(chan error, 1)
	go func() {
		_, err := client.NC.RequestWithContext(ctx, subject, nil)
		done <- err
	}()
	select {
	case <-received:
	case <-time.After(5 * time.Second):
		t.Fatal("request not received")
	}
	srv.Shutdown()
	start := time.Now()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !errors.Is(context.Cause(ctx), bus.ErrBusUnavailable) {
			t.Fatalf("call ended with %v (cause %v), want cancelled by the bus's outage", err, context.Cause(ctx))
		}
		t.Logf("call ended %v after the server's shutdown", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("call still waiting 5 s after the connection dropped")
	}

	restart()
	require.Eventually(t, client.NC.IsConnected, 10*time.Second, 10*time.Millisecond, "client reconnected")
	after, stopAfter := client.UntilDisconnected(deadline)
	defer stopAfter()
	if after.Err() != nil {
		t.Fatalf("context taken after the return: %v", after.Err())
	}
	kv, err := client.KV(after, bus.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(after, "disconnect-test", []byte("v")); err != nil {
		t.Fatalf("write after the return: %v", err)
	}
}

// An endpoint works on a request only as long as its caller waits for the
// reply (HeaderTimeout), not for its own, longer, timeout: after an
// outage, the attempts callers gave up on and retried are not all done
// again.
func TestEndpointStopsWhenItsCallerStopsWaiting(t *testing.T) {
	b := openBus(t)
	ended := make(chan time.Duration, 1)
	eps, err := b.Serve(t.Context(), bus.ServeConfig{Name: "slow", Logger: quiet},
		bus.Endpoint("wait", time.Minute, func(ctx context.Context, _ []byte, _ micro.Request) (any, error) {
			start := time.Now()
			<-ctx.Done()
			ended <- time.Since(start)
			return nil, ctx.Err()
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eps.Stop() })
	r := bus.NewRequester(b.NC, bus.RequestPolicy{Timeout: 300 * time.Millisecond, Attempts: 1})
	if _, err := r.Request(t.Context(), "slow", bus.RequestSubject("slow", "wait"), nil); err == nil {
		t.Fatal("the request was answered; want its attempt to time out")
	}
	select {
	case d := <-ended:
		if d > 2*time.Second {
			t.Errorf("handler worked %v, want about the caller's 300ms", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler still working 5 s after its caller gave up (endpoint timeout 1 min)")
	}
}
