package admin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/bus"
)

// Environment variables of the bootstrap commands, the same the services read.
//
//nolint:gosec // G101: the names of environment variables, not credentials
const (
	EnvNATSURL   = "ATOLL_NATS_URL"
	EnvNATSCreds = "ATOLL_NATS_CREDS"
)

// bootstrapCmd creates a region's streams and buckets as the admin NATS
// user, once, so that services need no JetStream admin rights; its auth
// subcommand makes the users and the server configuration.
func bootstrapCmd() *cobra.Command {
	var (
		url, creds, ca string
		replicas       int
		wait           time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Create the region's NATS streams and buckets, as the admin user",
		Long: `Bootstrap creates or updates the region's JetStream streams and Key-Value
buckets (libs/bus DefaultTopology) at the given replication, connected as
the admin NATS user, and exits. Run it once before the services, and again
after an upgrade that adds a stream or bucket: it is idempotent. Services
connect as their own users, which may not create streams.

'atoll-admin bootstrap auth' makes the users first: one credentials file per
service and the admin, and the nats-server configuration that lets each
only its own subjects.`,
		Example: `  atoll-admin bootstrap auth --dir /etc/atoll/nats
  nats-server -c nats.conf          # nats.conf: include /etc/atoll/nats/auth.conf
  atoll-admin bootstrap --nats nats://nats:4222 --creds /etc/atoll/nats/admin.nk --replicas 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			cfg := bus.Config{URL: url, Name: "atoll-bootstrap", Replicas: replicas, Logger: log}.WithCredentials(creds).WithCA(ca)
			if err := bus.Bootstrap(ctx, cfg); err != nil {
				return err
			}
			t := bus.DefaultTopology(replicas)
			fmt.Fprintf(cmd.OutOrStdout(), "%d streams and %d buckets ready at %d replicas\n", len(t.Streams), len(t.Buckets), max(replicas, 1))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "nats", envOr(EnvNATSURL, "nats://127.0.0.1:4222"), "NATS server URLs, comma-separated ($"+EnvNATSURL+")")
	f.StringVar(&creds, "creds", os.Getenv(EnvNATSCreds), "the admin user's credentials file ($"+EnvNATSCreds+")")
	f.StringVar(&ca, "nats-ca", os.Getenv(bus.EnvCAFile), "PEM CA file to verify the NATS servers with, over TLS ($"+bus.EnvCAFile+")")
	f.IntVar(&replicas, "replicas", 1, "replication of streams and buckets (3 or 5 in production)")
	f.DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for the NATS server")
	cmd.AddCommand(bootstrapAuthCmd(), bootstrapTLSCmd())
	return cmd
}

func bootstrapAuthCmd() *cobra.Command {
	var dir, config string
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Make the NATS users' credentials and the server configuration",
		Long: `Auth writes, into --dir, one credentials file per user (<user>.nk, mode
0600: the user's nkey seed; give each service its own as $ATOLL_NATS_CREDS)
unless it exists already, and the nats-server configuration of the users
(--config, default <dir>/auth.conf): their public keys and what each may
publish and subscribe to, from libs/bus Grants. The configuration holds no
secret; include it from the server's configuration file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := bus.CreateAuth(dir)
			if err != nil {
				return err
			}
			if config == "" {
				config = filepath.Join(dir, "auth.conf")
			}
			if err := a.WriteServerConfig(config); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, u := range bus.Users() {
				fmt.Fprintf(out, "%-11s %s  %s\n", u, a.PublicKey(u), a.CredentialsFile(u))
			}
			fmt.Fprintf(out, "server configuration: %s\n", config)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the credentials files (created with mode 0700)")
	cmd.Flags().StringVar(&config, "config", "", "where to write the server configuration (default <dir>/auth.conf)")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
