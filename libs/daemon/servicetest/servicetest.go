// Package servicetest checks a service's lifecycle the way daemon.Run
// composes it: the service's fx module with the admin port and its own
// bus connection, started, ready and stopped again and again in one
// process, against an embedded NATS server with the region's users and
// permissions, and then no goroutine of the service's left
// (go.uber.org/goleak).
package servicetest

import (
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/goleak"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/daemon"
	"atoll.dev/libs/daemon/admin"
)

// Spec is one service's start/stop check.
type Spec struct {
	// Service is the service's name (its fx module's and admin label).
	Service string
	// User is the NATS user it connects as (bus.UserScheduler...): the
	// permissions it runs with in a region.
	User string
	// Options are the service's module and whatever it needs supplied
	// (its Config, clusters.Members).
	Options []fx.Option
	// Times is how many times it is started and stopped; 20 when 0.
	Times int
	// Ready is how long each start may take to become ready; 30 s when 0.
	Ready time.Duration
}

// Region is an embedded NATS server with the region's users and
// permissions (bus.Auth) and its streams and buckets, for a service to
// connect to as its own user.
type Region struct {
	// URL is the server's client URL.
	URL string
	// Auth holds every user's credentials.
	Auth *bus.Auth
	// Admin is the admin user's connection, which created the topology.
	Admin *bus.Bus
}

// StartRegion starts an embedded NATS server (a random port, its store in
// a test directory) with users and permissions, and creates the topology;
// both end with the test.
func StartRegion(t testing.TB) *Region {
	t.Helper()
	dir := t.TempDir()
	auth, err := bus.CreateAuth(filepath.Join(dir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: filepath.Join(dir, "js"), Listen: true, Auth: auth, Name: "admin",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv := b.Server()
		b.Close()
		if srv != nil {
			srv.WaitForShutdown()
		}
	})
	return &Region{URL: b.ClientURL(), Auth: auth, Admin: b}
}

// StartStop starts and stops the service spec.Times times in r, each
// time as daemon.Run would (admin.Module, daemon.BusModule on the service
// user's credentials, the service's options, admin.Started), waits for it
// to be ready before stopping it, and fails the test if any goroutine
// started after r is left once the last stop returned (goleak, which
// waits for goroutines that are ending). Goroutines of the NATS server
// that r started are there before and are not counted: the check is
// about the service's own.
func StartStop(t *testing.T, r *Region, spec Spec) {
	t.Helper()
	times, ready := spec.Times, spec.Ready
	if times == 0 {
		times = 20
	}
	if ready == 0 {
		ready = 30 * time.Second
	}
	before := goleak.IgnoreCurrent()
	base := goroutineIDs()
	log := slog.New(slog.DiscardHandler)
	cfg := daemon.Config{Service: spec.Service, NATSURL: r.URL, NATSCreds: r.Auth.CredentialsFile(spec.User), LogLevel: "error"}
	for i := range times {
		var a *admin.Server
		app := fx.New(
			fx.Supply(cfg, log, admin.Config{Service: spec.Service, Listen: "127.0.0.1:0"}),
			fx.NopLogger,
			admin.Module,
			daemon.BusModule,
			fx.Options(spec.Options...),
			admin.Started,
			fx.Populate(&a),
		)
		if err := app.Err(); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), ready)
		if err := app.Start(ctx); err != nil {
			cancel()
			t.Fatalf("start %d: %v", i, err)
		}
		err := waitReady(ctx, a)
		cancel()
		if err != nil {
			_ = app.Stop(context.Background())
			t.Fatalf("start %d: not ready after %v: %v", i, ready, err)
		}
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = app.Stop(sctx)
		cancel()
		if err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
		if left := running(base, 200*time.Millisecond); len(left) > 0 {
			t.Fatalf("stop %d returned with %d goroutines of Atoll's still running (not joined on stop):\n\n%s", i, len(left), strings.Join(left, "\n\n"))
		}
	}
	goleak.VerifyNone(t, append(natsServerOwn(), before)...)
	t.Logf("%s started, ready and stopped %d times; nothing of it left", spec.Service, times)
}

// natsServerOwn ignores the goroutines the embedded NATS server keeps for
// each JetStream consumer (consumer.go, setLeader): a service's watches
// make ephemeral consumers, which the server deletes on its own clock
// (their inactive threshold), after the service's subscription is gone.
// They are the server's, run server code only, and hold nothing of the
// service's; any goroutine with a frame of the service or of the NATS
// client is still counted.
func natsServerOwn() []goleak.Option {
	const consumer = "github.com/nats-io/nats-server/v2/server.(*consumer)."
	return []goleak.Option{
		goleak.IgnoreAnyFunction(consumer + "loopAndGatherMsgs"),
		goleak.IgnoreAnyFunction(consumer + "processInboundAcks"),
		goleak.IgnoreAnyFunction(consumer + "processInboundNextMsgReqs"),
	}
}

// waitReady polls a's readiness checks until they pass or ctx ends.
func waitReady(ctx context.Context, a *admin.Server) error {
	for {
		err := a.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// running returns the stacks of the goroutines, other than the caller's
// and those of base, that run Atoll's code (a frame in atoll.dev/libs or
// atoll.dev/services): what a service's Stop left running. A Stop joins
// what it started, so nothing of the service's is still at work when it
// returns; grace only lets a goroutine that has signalled its end (closed
// a channel, called Done) take its last step out, which the scheduler
// may delay under -race.
func running(base map[string]bool, grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	for {
		var out []string
		for _, g := range stacks()[1:] { // the first is the caller's
			id, _, _ := strings.Cut(g, " [")
			if base[id] {
				continue
			}
			if strings.Contains(g, "atoll.dev/libs/") || strings.Contains(g, "atoll.dev/services/") {
				out = append(out, g)
			}
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// goroutineIDs returns the "goroutine N" header of every goroutine now.
func goroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for _, g := range stacks() {
		id, _, _ := strings.Cut(g, " [")
		ids[id] = true
	}
	return ids
}

// stacks returns every goroutine's stack, the caller's first.
func stacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(strings.TrimSpace(string(buf[:n])), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}
