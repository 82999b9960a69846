package training

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/busclient"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// One region for the package: zones a, b, c of 2 general nodes each, every
// zone with testdata/stages.yaml (see the package doc), and the GPU nodes
// of gpuPools.
var (
	reg *region.Region
	// cl reads as the admin and calls as the gateway, whose user alone
	// may read quota.
	cl *busclient.Client
	// fleetErr is why the GPU nodes could not be added.
	fleetErr error
)

// gpuPools are the GPU nodes each zone gets besides its general nodes.
var gpuPools = map[string]testenv.NodePool{
	"zone-a": {Name: "h100", Count: 1, CPU: "32", Memory: "256Gi", GPUs: 3, GPUType: "h100", InstanceType: "p5.48xlarge"},
	"zone-b": {Name: "a100", Count: 2, CPU: "32", Memory: "256Gi", GPUs: 2, GPUType: "a100", InstanceType: "p4d.24xlarge"},
	"zone-c": {Name: "a100", Count: 1, CPU: "32", Memory: "256Gi", GPUs: 2, GPUType: "a100", InstanceType: "p4d.24xlarge"},
}

func TestMain(m *testing.M) {
	stages, err := filepath.Abs("testdata/stages.yaml")
	if err != nil {
		panic(err)
	}
	zones := map[string][]string{"a": {stages}, "b": {stages}, "c": {stages}}
	os.Exit(e2e.Run(m, e2e.Package{Name: "training", GatewayUser: "atoll-training-gateway",
		Options: region.Options{Nodes: 2, ZoneConfigs: zones}},
		func(e *e2e.Env) {
			reg, cl = e.Region, e.Client
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, c := range reg.Env.Clusters {
				if p, ok := gpuPools[c.Name]; ok {
					if _, err := c.AddNodes(ctx, p); err != nil {
						fleetErr = fmt.Errorf("add GPU nodes to %s: %w", c.Name, err)
						return
					}
				}
			}
		}))
}

func needRegion(t *testing.T) {
	t.Helper()
	if reg == nil {
		t.Skip("end-to-end tests need member clusters (not under -short)")
	}
	if fleetErr != nil {
		t.Fatal(fleetErr)
	}
}
