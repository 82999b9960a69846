package training

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

	"atoll.dev/libs/bus"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/region"
)

var (
	reg     *region.Region
	logPath string
	// gwBus is a connection as the gateway, whose user alone may read
	// quota (quota's get answers only the gateway).
	gwBus *bus.Bus
)

// gpuPools are the GPU nodes each zone gets besides its general nodes.
var gpuPools = map[string]testenv.NodePool{
	"zone-a": {Name: "h100", Count: 1, CPU: "32", Memory: "256Gi", GPUs: 3, GPUType: "h100", InstanceType: "p5.48xlarge"},
	"zone-b": {Name: "a100", Count: 2, CPU: "32", Memory: "256Gi", GPUs: 2, GPUType: "a100", InstanceType: "p4d.24xlarge"},
	"zone-c": {Name: "a100", Count: 1, CPU: "32", Memory: "256Gi", GPUs: 2, GPUType: "a100", InstanceType: "p4d.24xlarge"},
}

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
	dir, err := os.MkdirTemp("", "atoll-training-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	logFile, err := os.CreateTemp("", "atoll-training-*.log")
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
	reg, err = region.Start(ctx, region.Options{Dir: dir, Nodes: 2, Logger: log,
		ZoneConfigs: map[string][]string{"a": {stages}, "b": {stages}, "c": {stages}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start region:", err, "(log:", logPath+")")
		return 1
	}
	for _, c := range reg.Env.Clusters {
		if p, ok := gpuPools[c.Name]; ok {
			if _, err := c.AddNodes(ctx, p); err != nil {
				fmt.Fprintln(os.Stderr, "add GPU nodes:", err)
				reg.StopAndAudit()
				return 1
			}
		}
	}
	if gwBus, err = reg.ConnectAs("atoll-training-gateway", bus.UserGateway); err != nil {
		fmt.Fprintln(os.Stderr, "connect as the gateway:", err)
		reg.StopAndAudit()
		return 1
	}
	defer gwBus.Close()
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
