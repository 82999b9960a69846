package bench

import (
	"log/slog"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }

// regionClient returns a client of reg that reads as the admin
// (reg.Bus) and calls the endpoints as the gateway's NATS user, the only
// one they answer, and the gateway connection it calls over, which the
// caller closes before it stops the region. At cleanup the benchmark
// fails if any service met a NATS permission violation.
func regionClient(b *testing.B, reg *region.Region) (*busclient.Client, *bus.Bus) {
	b.Helper()
	gw, err := reg.ConnectAs("atoll-bench-gateway", bus.UserGateway)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if v := reg.PermissionViolations(); len(v) > 0 {
			b.Errorf("%d NATS permission violations, first: %s", len(v), v[0])
		}
	})
	return busclient.New(reg.Bus, gw), gw
}

// benchLogger logs to stderr at the level ATOLL_BENCH_LOG names (error by
// default).
func benchLogger() *slog.Logger {
	level := slog.LevelError
	_ = level.UnmarshalText([]byte(os.Getenv("ATOLL_BENCH_LOG")))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
