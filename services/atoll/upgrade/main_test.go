package upgrade

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
)

// One region for the package.
var (
	reg     *region.Region
	gwBus   *bus.Bus
	cl      *busclient.Client
	logPath string
)

// nodesPerZone keeps a rotation of the three clusters within minutes.
const nodesPerZone = 3

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() || flag.Lookup("test.run").Value.String() == "^$" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "atoll-upgrade-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	logFile, err := os.CreateTemp("", "atoll-upgrade-*.log")
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	reg, err = region.Start(ctx, region.Options{Dir: dir, Nodes: nodesPerZone, Logger: log, Replicas: 2, Listen: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start region:", err, "(log:", logPath+")")
		return 1
	}
	fmt.Fprintf(os.Stderr, "region ready in %v; services log to %s\n", time.Since(start).Round(time.Millisecond), logPath)
	gwBus, err = reg.ConnectAs("atoll-upgrade-e2e-gateway", bus.UserGateway)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect as the gateway:", err)
		_ = reg.StopAndAudit()
		return 1
	}
	cl = busclient.New(reg.Bus, gwBus)
	code := m.Run()
	gwBus.Close()
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
