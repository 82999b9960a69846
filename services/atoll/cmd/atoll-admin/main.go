// Command atoll-admin holds the platform admins' commands that talk to a
// region's NATS directly: bootstrap, remediation and upgrade (see
// services/atoll/admin).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"atoll.dev/services/atoll/admin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := admin.Root().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
