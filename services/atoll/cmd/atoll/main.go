// Command atoll is Atoll's command line, a client of a region's Compute
// API (libs/sdk); atoll-dev runs a region in one process, atoll-admin
// holds the platform admins' NATS commands.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"atoll.dev/services/atoll/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Root().ExecuteContext(ctx)
	stop()
	if err != nil {
		var exit *cli.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.Code)
		}
		cli.PrintError(os.Stderr, err)
		os.Exit(1)
	}
}
