// Package cli implements the atoll command line.
package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/busclient"
)

// ExitError ends the program with a code, after the message was printed.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit %d", e.Code) }

// DefaultNATS is where `atoll dev` listens and where the other commands
// look by default.
const DefaultNATS = "nats://127.0.0.1:4222"

type globals struct {
	nats    string
	project string
	timeout time.Duration
}

// Root returns the atoll command tree.
func Root() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "atoll",
		Short: "Atoll: one compute API in front of zonal Kubernetes clusters",
		Long: `Atoll is a regional compute platform. Run a whole region locally with
'atoll dev', then submit workloads to it with 'atoll apply -f FILE'.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.nats, "nats", envOr("ATOLL_NATS_URL", DefaultNATS), "region's NATS URL (ATOLL_NATS_URL)")
	root.PersistentFlags().StringVarP(&g.project, "project", "p", envOr("ATOLL_PROJECT", ""), "project (ATOLL_PROJECT)")
	root.PersistentFlags().DurationVar(&g.timeout, "timeout", 30*time.Second, "deadline for the whole command")
	root.AddCommand(devCmd(), applyCmd(g), getCmd(g), deleteCmd(g), quotaCmd(g), clustersCmd(g))
	return root
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// connect opens a client on the region's bus.
func (g *globals) connect(ctx context.Context) (*busclient.Client, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{URL: g.nats, Name: "atoll-cli"})
	if err != nil {
		return nil, nil, fmt.Errorf("reach the region at %s (is `atoll dev` running?): %w", g.nats, err)
	}
	return busclient.New(b), b.Close, nil
}
