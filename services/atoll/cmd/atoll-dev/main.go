// Command atoll-dev runs a whole region in one process: an embedded NATS
// server, one local member cluster per zone and every service (`make
// run`; see services/atoll/devregion).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"atoll.dev/services/atoll/devregion"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := devregion.Command().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
