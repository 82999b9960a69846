package rollout

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/busclient"
	"atoll.dev/services/atoll/region"
)

// One region for the package: zones a, b, c of 4 nodes each; zone b with
// KWOK's failure stage (see the package doc).
var (
	reg   *region.Region
	gwBus *bus.Bus
	cl    *busclient.Client
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	// No region for -short, or when no test is selected.
	if testing.Short() || flag.Lookup("test.run").Value.String() == "^$" {
		return m.Run()
	}
	stages, err := filepath.Abs("testdata/zone-b-stages.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "atoll-rollout-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	level := slog.LevelWarn
	if os.Getenv("ATOLL_E2E_DEBUG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg, err = region.Start(ctx, region.Options{Dir: dir, Nodes: 4, Logger: log,
		ZoneConfigs: map[string][]string{"b": {stages}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start region:", err)
		return 1
	}
	defer func() {
		// Every service kept to its grant (libs/bus Grants) the whole run.
		if !reg.StopAndAudit() {
			code = 1
		}
	}()
	gwBus, err = reg.ConnectAs("atoll-rollout-gateway", bus.UserGateway)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect as the gateway:", err)
		return 1
	}
	defer gwBus.Close()
	cl = busclient.New(reg.Bus, gwBus)
	return m.Run()
}

func needRegion(t *testing.T) {
	t.Helper()
	if reg == nil {
		t.Skip("end-to-end tests need member clusters (not under -short)")
	}
}
