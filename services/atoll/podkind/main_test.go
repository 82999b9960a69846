package podkind

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"atoll.dev/services/atoll/region"
)

var (
	reg     *region.Region
	logPath string
)

// nodesPerZone keeps the clusters small.
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
	stages, err := filepath.Abs("testdata/stages.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "atoll-podkind-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// A frozen cluster makes the services log a lot: the log goes to a
	// file, kept when a test fails.
	logFile, err := os.CreateTemp("", "atoll-podkind-*.log")
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
	reg, err = region.Start(ctx, region.Options{Dir: dir, Nodes: nodesPerZone, Logger: log,
		ZoneConfigs: map[string][]string{"a": {stages}, "b": {stages}, "c": {stages}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start region:", err, "(log:", logPath+")")
		return 1
	}
	fmt.Fprintf(os.Stderr, "region ready in %v; services log to %s\n", time.Since(start).Round(time.Millisecond), logPath)
	code := m.Run()
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
