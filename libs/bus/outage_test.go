package bus_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/micro"
	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
)

// countingHandler counts log records by message.
type countingHandler struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Message]++
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

// A service started while NATS is down waits for it instead of failing.
func TestOpenWaitsForTheServer(t *testing.T) {
	port := freePorts(t, 1)[0]
	logs := &countingHandler{n: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opened := make(chan error, 1)
	var b *bus.Bus
	start := time.Now()
	go func() {
		var err error
		b, err = bus.Open(ctx, bus.Config{URL: "nats://127.0.0.1:" + strconv.Itoa(port), Name: t.Name(), Logger: slog.New(logs)})
		opened <- err
	}()
	// Open has found nothing there, more than once, and is still trying.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, logs.count("nats not reachable, retrying"), 3, "failed attempts logged")
	}, 10*time.Second, 10*time.Millisecond)
	select {
	case err := <-opened:
		t.Fatalf("Open returned %v with no server", err)
	default:
	}
	srv, err := bus.StartServer(bus.ServerOptions{StoreDir: t.TempDir(), Listen: true, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	up := time.Now()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("Open after the server started: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open did not connect within 10s of the server starting")
	}
	defer b.Close()
	t.Logf("connected %v after the server started (waited %v in all)", time.Since(up).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if _, err := b.KV(ctx, bus.BucketWorkloads); err != nil {
		t.Errorf("topology after a late start: %v", err)
	}

	// An Open whose context ends while NATS is still away fails with it.
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	if _, err := bus.Open(short, bus.Config{URL: "nats://127.0.0.1:" + strconv.Itoa(freePorts(t, 1)[0]), Logger: slog.New(logs)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Open with no server and an ending context: %v, want DeadlineExceeded", err)
	}
}

// steady runs n callers requesting subject back to back until stop is
// closed, and reports each success's time and the number of failures.
func steady(r *bus.Requester, subject string, n int, stop <-chan struct{}) (successes func() []time.Time, failures *atomic.Int32) {
	var (
		mu   sync.Mutex
		oks  []time.Time
		wg   sync.WaitGroup
		errs atomic.Int32
	)
	for range n {
		wg.Go(func() {
			pace := time.NewTicker(10 * time.Millisecond)
			defer pace.Stop()
			for {
				select {
				case <-stop:
					return
				case <-pace.C:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := r.Request(ctx, "svc", subject, nil)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				mu.Lock()
				oks = append(oks, time.Now())
				mu.Unlock()
			}
		})
	}
	return func() []time.Time {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return oks
	}, &errs
}

func longestGap(ts []time.Time) time.Duration {
	var gap time.Duration
	for i := 1; i < len(ts); i++ {
		gap = max(gap, ts[i].Sub(ts[i-1]))
	}
	return gap
}

// A target stopped for two seconds costs its callers a wait, not errors,
// and is found again within about a second of its return.
func TestBriefTargetOutageIsWaitedOut(t *testing.T) {
	b := openBus(t)
	subject := bus.RequestSubject("svc", "do")
	serve := func() micro.Service {
		svc, err := micro.AddService(b.NC, micro.Config{Name: "svc", Version: "0.0.1",
			Endpoint: &micro.EndpointConfig{Subject: subject, Handler: micro.HandlerFunc(func(r micro.Request) { _ = r.Respond([]byte("ok")) })}})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	svc := serve()
	r := bus.NewRequester(b.NC, bus.RequestPolicy{})
	stop := make(chan struct{})
	successes, failures := steady(r, subject, 4, stop)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, r.Breakers().For("svc").Counts().TotalSuccesses, uint32(20), "callers going")
	}, 5*time.Second, 10*time.Millisecond)
	down := time.Now()
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, gobreaker.StateOpen, r.Breakers().State("svc"), "breaker with the target gone")
	}, 5*time.Second, 10*time.Millisecond)
	time.Sleep(2*time.Second - time.Since(down)) // the subject: a 2s outage of the target
	svc = serve()
	defer func() { _ = svc.Stop() }()
	back := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, gobreaker.StateClosed, r.Breakers().State("svc"), "breaker after the target's return")
	}, 5*time.Second, 5*time.Millisecond)
	recovered := time.Since(back)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, r.Breakers().For("svc").Counts().TotalSuccesses, uint32(20), "successes since the return")
	}, 5*time.Second, 10*time.Millisecond)
	close(stop)
	oks := successes()
	gap := longestGap(oks)
	t.Logf("target down %v: breaker closed %v after its return; longest gap between successes %v; %d of %d requests failed",
		back.Sub(down).Round(time.Millisecond), recovered.Round(time.Millisecond), gap.Round(time.Millisecond), failures.Load(), int(failures.Load())+len(oks))
	if recovered > 1500*time.Millisecond {
		t.Errorf("requests succeeded again %v after the target's return, want within about 1s", recovered)
	}
	if gap > 3500*time.Millisecond {
		t.Errorf("longest gap %v for a 2s outage", gap)
	}
	if n := failures.Load(); n > 4 {
		t.Errorf("%d requests failed during a 2s outage; callers should wait it out", n)
	}
}

// serverAndTwoClients starts an embedded server and opens two connections
// to it, "server" and "client"; restart starts the server again on the
// same port and store once the test has shut it down.
func serverAndTwoClients(t *testing.T) (srv *server.Server, restart func(), server, client *bus.Bus) {
	t.Helper()
	dir := t.TempDir()
	srv, err := bus.StartServer(bus.ServerOptions{StoreDir: dir, Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	port, url := srv.Addr().(*net.TCPAddr).Port, srv.ClientURL()
	restart = func() {
		again, err := bus.StartServer(bus.ServerOptions{StoreDir: dir, Listen: true, Port: port})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(again.Shutdown)
	}
	connect := func(name string) *bus.Bus {
		b, err := bus.Open(context.Background(), bus.Config{URL: url, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}
	return srv, restart, connect("server"), connect("client")
}

// Failures while the bus itself is down, and while the services come back
// onto it, are the bus's outage: they never open a target's breaker.
func TestBusOutageDoesNotOpenBreakers(t *testing.T) {
	srv, restart, server, client := serverAndTwoClients(t)
	ctx := context.Background()
	subject := bus.RequestSubject("svc", "do")
	svc, err := micro.AddService(server.NC, micro.Config{Name: "svc", Version: "0.0.1",
		Endpoint: &micro.EndpointConfig{Subject: subject, Handler: micro.HandlerFunc(func(r micro.Request) { _ = r.Respond([]byte("ok")) })}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	if err := server.NC.Flush(); err != nil { // the endpoint's subscription is in place
		t.Fatal(err)
	}
	r := bus.NewRequester(client.NC, bus.RequestPolicy{Timeout: 300 * time.Millisecond, RetryFor: 200 * time.Millisecond,
		Breaker: bus.BreakerPolicy{ConsecutiveFailures: 2, OpenFor: time.Minute}})
	if _, err := r.Request(ctx, "svc", subject, nil); err != nil {
		t.Fatal(err)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	// A server shutting down drops the responders' connections first and
	// may answer "no responders" until it drops this one: the calls under
	// test are those made once the connection knows it is down.
	require.Eventually(t, func() bool { return !client.NC.IsConnected() }, 5*time.Second, time.Millisecond, "client still connected")
	for i := range 5 {
		_, err := r.Request(ctx, "svc", subject, nil)
		if !bus.IsBusOutage(err) {
			t.Fatalf("request %d with the bus down: %v, want a bus outage", i, err)
		}
	}
	if st, c := r.Breakers().State("svc"), r.Breakers().For("svc").Counts(); st != gobreaker.StateClosed || c.TotalFailures != 0 {
		t.Fatalf("breaker %v, counts %+v after a bus outage; want closed, no failures", st, c)
	}

	restart()
	back := time.Now()
	var tripped atomic.Value // the first breaker state other than closed seen while the bus came back
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := r.Request(ctx, "svc", subject, nil)
		if st := r.Breakers().State("svc"); st != gobreaker.StateClosed {
			tripped.CompareAndSwap(nil, st)
		}
		assert.NoError(c, err, "request after the server's restart")
	}, 10*time.Second, 5*time.Millisecond)
	if st := tripped.Load(); st != nil {
		t.Fatalf("breaker %v while the bus came back", st)
	}
	t.Logf("requests succeed %v after the server's restart; breaker counts %+v", time.Since(back).Round(time.Millisecond), r.Breakers().For("svc").Counts())
	if c := r.Breakers().For("svc").Counts(); c.TotalFailures != 0 {
		t.Errorf("failures counted during the bus's outage: %+v", c)
	}
}

// A request in flight when the server goes away is lost with it: its
// attempt ends as the connection drops, and the retry is answered soon
// after the server's return, not once the attempt's Timeout has passed.
func TestRequestLostWithTheServerIsRetriedOnItsReturn(t *testing.T) {
	srv, restart, server, client := serverAndTwoClients(t)
	ctx := context.Background()
	subject := bus.RequestSubject("svc", "do")
	received := make(chan struct{}, 1)
	var calls atomic.Int32
	// The first request is received and never answered, as if the server
	// went away with its reply; later ones are answered.
	svc, err := micro.AddService(server.NC, micro.Config{Name: "svc", Version: "0.0.1",
		Endpoint: &micro.EndpointConfig{Subject: subject, Handler: micro.HandlerFunc(func(r micro.Request) {
			if calls.Add(1) == 1 {
				received <- struct{}{}
				return
			}
			_ = r.Respond([]byte("ok"))
		})}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	if err := server.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	const attempt = 30 * time.Second
	r := bus.NewRequester(client.NC, bus.RequestPolicy{Timeout: attempt, RetryFor: attempt})
	done := make(chan error, 1)
	go func() {
		_, err := r.Request(ctx, "svc", subject, nil)
		done <- err
	}()
	<-received
	srv.Shutdown()
	srv.WaitForShutdown()
	<-time.After(300 * time.Millisecond) // the outage itself is the subject
	restart()
	back := time.Now()
	select {
	case err := <-done:
		require.NoError(t, err, "request across the outage")
		t.Logf("answered %v after the server's return; %d calls received", time.Since(back).Round(time.Millisecond), calls.Load())
		assert.Less(t, time.Since(back), 5*time.Second, "answered long after the server's return")
	case <-time.After(attempt / 2):
		t.Fatalf("request not answered %v after the server's return: its attempt waited for its Timeout", attempt/2)
	}
}
