package daemon_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/daemon"
	"atoll.dev/libs/daemon/admin"
)

// With --nats-creds a service connects as its own NATS user and opens on
// the topology the bootstrap made, which its user could not create.
func TestNewBusWithCredentials(t *testing.T) {
	dir := t.TempDir()
	auth, err := bus.CreateAuth(filepath.Join(dir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bus.StartServer(bus.ServerOptions{StoreDir: filepath.Join(dir, "js"), Listen: true, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Bootstrap(ctx, bus.Config{URL: srv.ClientURL(), NKeyFile: auth.CredentialsFile(bus.UserAdmin), Name: "bootstrap"}); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, user := range []string{bus.UserGateway, bus.UserScheduler, bus.UserAggregator} {
		t.Run(user, func(t *testing.T) {
			lc := fxtest.NewLifecycle(t)
			cfg := daemon.Config{Service: user, NATSURL: srv.ClientURL(), NATSCreds: auth.CredentialsFile(user)}
			a, err := admin.New(admin.Config{Service: user}, quiet)
			if err != nil {
				t.Fatal(err)
			}
			b, err := daemon.NewBus(lc, cfg, quiet, a)
			if err != nil {
				t.Fatal(err)
			}
			lc.RequireStart()
			defer lc.RequireStop()
			if b.User() != user {
				t.Errorf("connected as %q, want %q", b.User(), user)
			}
			if got := b.NC.Opts.Name; got != "atoll-"+user {
				t.Errorf("connection name %q, want atoll-%s", got, user)
			}
			// The fill of each stream the service uses, read with its
			// own user's permissions.
			mfs, err := a.Registry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, mf := range mfs {
				if mf.GetName() != "atoll_stream_fill_ratio" {
					continue
				}
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "stream" {
							got = append(got, l.GetValue())
						}
					}
				}
			}
			slices.Sort(got)
			if want := bus.OwnStreams(user); !slices.Equal(got, want) {
				t.Errorf("streams with a fill ratio %v, want %v", got, want)
			}
		})
	}
}

// A service with no NATS credentials refuses to start, unless told it
// runs for development.
func TestNewBusWithoutCredentials(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc := fxtest.NewLifecycle(t)
	_, err := daemon.NewBus(lc, daemon.Config{Service: "svc", NATSURL: "nats://127.0.0.1:1"}, quiet, nil)
	if !errors.Is(err, daemon.ErrNoCredentials) {
		t.Fatalf("NewBus without credentials: %v, want ErrNoCredentials", err)
	}

	srv, err := bus.StartServer(bus.ServerOptions{StoreDir: t.TempDir(), Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	b, err := daemon.NewBus(lc, daemon.Config{Service: "svc", NATSURL: srv.ClientURL(), InsecureDev: true}, quiet, nil)
	if err != nil {
		t.Fatalf("NewBus with --insecure-dev: %v", err)
	}
	lc.RequireStart()
	defer lc.RequireStop()
	if b.User() != "" {
		t.Errorf("connected as %q, want no user", b.User())
	}
}

// A service's start hooks may outlast fx's default bound (a large
// region's mirrors filling on a loaded machine) and the readiness target
// of 30 s: Run gives them StartTimeout.
func TestStartTimeoutOutlastsTheReadinessTarget(t *testing.T) {
	if daemon.StartTimeout <= fx.DefaultTimeout || daemon.StartTimeout < 30*time.Second {
		t.Errorf("StartTimeout %v: want more than fx's default %v and the 30 s readiness target", daemon.StartTimeout, fx.DefaultTimeout)
	}
}
