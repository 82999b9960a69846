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
	EnvNATSURL      = "ATOLL_NATS_URL"
	EnvNATSCreds    = "ATOLL_NATS_CREDS"
	EnvNATSMaxBytes = "ATOLL_NATS_MAX_BYTES"
)

// bootstrapCmd creates a region's streams and buckets as the admin NATS
// user, once, so that services need no JetStream admin rights; its auth
// subcommand makes the users and the server configuration.
func bootstrapCmd() *cobra.Command {
	var (
		url, creds, ca string
		maxBytes       string
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

Every stream and bucket has a size limit (libs/bus DefaultMaxBytes, under
3 GiB in all); --max-bytes changes some, by stream or bucket name. Buckets
deny purges and rollups, those made by an older version included.

'atoll-admin bootstrap auth' makes the users first: one credentials file per
service and the admin, and the nats-server configuration that lets each
only its own subjects.`,
		Example: `  atoll-admin bootstrap auth --dir /etc/atoll/nats
  nats-server -c nats.conf          # nats.conf: include /etc/atoll/nats/auth.conf
  atoll-admin bootstrap --nats nats://nats:4222 --creds /etc/atoll/nats/admin.nk --replicas 3
  atoll-admin bootstrap --max-bytes workloads=2GiB,ATOLL_AUDIT=4GiB ...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			limits, err := bus.ParseMaxBytes(maxBytes)
			if err != nil {
				return fmt.Errorf("--max-bytes: %w", err)
			}
			t, err := bus.DefaultTopology(replicas).WithMaxBytes(limits)
			if err != nil {
				return fmt.Errorf("--max-bytes: %w", err)
			}
			cfg := bus.Config{URL: url, Name: "atoll-bootstrap", Replicas: replicas, MaxBytes: limits, Logger: log}.WithCredentials(creds).WithCA(ca)
			if err := bus.Bootstrap(ctx, cfg); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d streams and %d buckets ready at %d replicas\n", len(t.Streams), len(t.Buckets), max(replicas, 1))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "nats", envOr(EnvNATSURL, "nats://127.0.0.1:4222"), "NATS server URLs, comma-separated ($"+EnvNATSURL+")")
	f.StringVar(&creds, "creds", os.Getenv(EnvNATSCreds), "the admin user's credentials file ($"+EnvNATSCreds+")")
	f.StringVar(&ca, "nats-ca", os.Getenv(bus.EnvCAFile), "PEM CA file to verify the NATS servers with, over TLS ($"+bus.EnvCAFile+")")
	f.IntVar(&replicas, "replicas", 1, "replication of streams and buckets (3 or 5 in production)")
	f.StringVar(&maxBytes, "max-bytes", os.Getenv(EnvNATSMaxBytes), "size limits replacing the defaults, by stream or bucket name: workloads=2GiB,ATOLL_AUDIT=4GiB ($"+EnvNATSMaxBytes+")")
	f.DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for the NATS server")
	cmd.AddCommand(bootstrapAuthCmd(), bootstrapMemberCmd(), bootstrapTLSCmd(), bootstrapKEKCmd())
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
