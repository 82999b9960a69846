// Command atoll is Atoll's command line: `atoll dev` runs a whole region
// in one process; the other commands talk to a region.
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
