// Package devregion is the atoll-dev command: a whole region in this
// process (embedded NATS, local member clusters, every service), the one
// `make run` starts. It is its own binary so that the atoll CLI users
// install links none of the services.
package devregion

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/region"
)

// Command returns the atoll-dev command.
func Command() *cobra.Command {
	var (
		zones, gpuZones string
		nodes, port     int
		replicas        int
		dir, logLevel   string
		listen          string
		metricsServer   bool
		plainHTTP       bool
	)
	cmd := &cobra.Command{
		Use:   "atoll-dev",
		Short: "Run a whole region in this process: embedded NATS, local member clusters, every service",
		Long: `atoll-dev starts an embedded NATS JetStream server, one local Kubernetes member
cluster per zone (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK nodes, from the binaries 'make tools' builds), and
every Atoll service, the gateway included: it prints the Compute API's URL
and a platform admin token. Ctrl-C stops everything and leaves nothing running.

NATS permissions are on, as in production: each service connects as its
own NATS user, allowed only its own subjects, and the region's own
connection is the admin, which creates the streams and buckets. The users'
credentials are made in <dir>/nats; to reach the bus from another process,
connect with one of them (--creds <dir>/nats/admin.nk, $ATOLL_NATS_CREDS),
e.g. a service run on its own: ATOLL_NATS_CREDS=<dir>/nats/scheduler.nk.

The Compute API is HTTPS: atoll-dev makes a CA of its own in <dir>/tls
(ca.crt, kept across runs of the same --dir) and a certificate for
localhost and 127.0.0.1 signed by it; 'atoll login --ca <dir>/tls/ca.crt'
trusts it, so nothing skips verification. --plain-http serves plain HTTP
instead (development only: the token then travels in clear).`,
		Example: `  atoll-dev --zones a,b,c --nodes 10 --gpu-zones b
  atoll apply -f deploy/examples/app.yaml`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			if dir == "" {
				d, err := os.MkdirTemp("", "atoll-dev-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				dir = d
			}
			ctx := cmd.Context()
			fmt.Fprintf(cmd.ErrOrStderr(), "starting region: zones %s, %d nodes each, state in %s\n", zones, nodes, dir)
			r, err := region.Start(ctx, region.Options{
				Dir: dir, Zones: split(zones), GPUZones: split(gpuZones), Nodes: nodes,
				Listen: true, Port: port, Logger: log, OwnSignals: true, GatewayListen: listen,
				Replicas: replicas, MetricsServer: metricsServer, TLS: !plainHTTP,
				NodeProgress: cmd.ErrOrStderr(),
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "\nAtoll region running.\n  API:       %s  (docs %s/docs, console %s/console/)\n  token:     %s  (platform admin)\n  NATS:      %s  (admin credentials %s; a service's: %s)\n  clusters:  %s\n",
				r.GatewayURL, r.GatewayURL, r.GatewayURL, r.AdminToken, r.Bus.ClientURL(),
				r.NATSAuth.CredentialsFile(bus.UserAdmin), r.NATSAuth.CredentialsFile("<service>"), r.ClustersFile)
			for _, c := range r.Env.Clusters {
				fmt.Fprintf(out, "  %-10s kubeconfig %s\n", c.Name+":", c.Kubeconfig)
			}
			if r.CAFile != "" {
				fmt.Fprintf(out, "  CA:        %s  (signed the API's certificate)\n", r.CAFile)
			}
			fmt.Fprintf(out, "\nSign in:            atoll login --server %s%s --token %s --project demo\nSubmit a workload:  atoll apply -f deploy/examples/app.yaml\nWatch it:           atoll get app web\nStop:               Ctrl-C\n", r.GatewayURL, caFlag(r.CAFile), r.AdminToken)
			<-ctx.Done()
			fmt.Fprintln(cmd.ErrOrStderr(), "\nstopping region...")
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := r.Stop(sctx); err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "region stopped; member clusters removed")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&zones, "zones", "a,b,c", "zones, one member cluster each")
	f.IntVar(&nodes, "nodes", 10, "simulated nodes per zone (16 CPU, 64 GiB each); thousands are created in parallel, with progress on stderr (3,000 take a few minutes)")
	f.StringVar(&gpuZones, "gpu-zones", "", "zones that also get 2 GPU nodes (8 x a100 each)")
	f.IntVar(&port, "nats-port", 4222, "loopback port of the embedded NATS server")
	f.StringVar(&dir, "dir", "", "state directory (default: a temporary one, removed on exit)")
	f.StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	f.IntVar(&replicas, "replicas", 1, "replicas of every service, each its own application and bus connection (gateway replicas after the first listen on free ports)")
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "address of the Compute API (gateway)")
	f.BoolVar(&plainHTTP, "plain-http", false, "serve the Compute API over plain HTTP instead of HTTPS (development only)")
	f.BoolVar(&metricsServer, "metrics-server", true, "run metrics-server in every member cluster (bin/metrics-server), so Scalers get cpu and memory samples; pods' simulated usage comes from the annotation kwok.x-k8s.io/usage-cpu")
	return cmd
}

// caFlag is the login flag that trusts the region's CA, "" without one.
func caFlag(file string) string {
	if file == "" {
		return ""
	}
	return " --ca " + file
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
