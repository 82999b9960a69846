package testenv

import (
	"context"
	"testing"
	"time"
)

// New starts member clusters for a test and tears them down when the test
// ends, passed or failed. A test is skipped under -short, and fails when
// the binaries are missing (run `make tools`).
func New(tb testing.TB, specs ...ClusterSpec) *Env {
	tb.Helper()
	if testing.Short() {
		tb.Skip("member clusters are not started under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e, err := Start(ctx, Options{}, specs...)
	if err != nil {
		tb.Fatalf("start member clusters: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			tb.Errorf("stop member clusters: %v", err)
		}
	})
	return e
}

// Zones returns cluster specs for the given zones, named zone-<z>.
func Zones(zones ...string) []ClusterSpec {
	specs := make([]ClusterSpec, len(zones))
	for i, z := range zones {
		specs[i] = ClusterSpec{Zone: z}
	}
	return specs
}
