// Package tiers holds the end-to-end tests of resource tiers: preemption
// of Preemptible work for Reserved work and its return, the tier-ordered
// queue, and the burst buffer, on a region of three small member
// clusters (zones a, b, c; nodesPerZone nodes of 16 CPU each), so that a
// few dozen Apps fill it.
package tiers

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/busclient"
	"atoll.dev/services/atoll/region"
	"atoll.dev/services/scheduler"
)

var (
	reg     *region.Region
	gwBus   *bus.Bus
	cl      *busclient.Client
	logPath string
)

// nodesPerZone: each cluster has 32 CPU, room for 10 pods of 3 CPU.
const nodesPerZone = 2

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// No region for -short, or when no test is selected.
	if testing.Short() || flag.Lookup("test.run").Value.String() == "^$" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "atoll-tiers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	logFile, err := os.CreateTemp("", "atoll-tiers-*.log")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logPath = logFile.Name()
	level := slog.LevelInfo
	if os.Getenv("ATOLL_E2E_DEBUG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	klog.LogToStderr(false)
	klog.SetOutput(logFile)
	// The scheduler keeps what it placed counted until an inventory 5 s
	// after the decision: the fill below places pod after pod on full
	// clusters, and an inventory computed before a pod is bound would
	// show room that is not there (see scheduler.Options.AssumeGrace).
	if err := os.Setenv(scheduler.EnvAssumeGrace, "5s"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	reg, err = region.Start(ctx, region.Options{Dir: dir, Nodes: nodesPerZone, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start region:", err, "(log:", logPath+")")
		return 1
	}
	fmt.Fprintf(os.Stderr, "region ready in %v; services log to %s\n", time.Since(start).Round(time.Millisecond), logPath)
	code := func() int {
		gwBus, err = reg.ConnectAs("atoll-tiers-gateway", bus.UserGateway)
		if err != nil {
			fmt.Fprintln(os.Stderr, "connect as the gateway:", err)
			return 1
		}
		defer gwBus.Close()
		cl = busclient.New(reg.Bus, gwBus)
		return m.Run()
	}()
	// Every service kept to its grant (libs/bus Grants) the whole run.
	if !reg.StopAndAudit() {
		code = 1
	}
	_ = logFile.Close()
	if code == 0 {
		_ = os.Remove(logPath)
	} else {
		fmt.Fprintln(os.Stderr, "services' log kept in", logPath)
	}
	return code
}

func needRegion(t *testing.T) {
	t.Helper()
	if reg == nil {
		t.Skip("end-to-end tests need member clusters (not under -short)")
	}
}
