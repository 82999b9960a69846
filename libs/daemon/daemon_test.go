package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/fx/fxtest"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/daemon"
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
			b, err := daemon.NewBus(lc, cfg, quiet, nil)
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
		})
	}
}
