package training

import (
	"context"
	"fmt"
	"testing"

	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

// The suite's region: zones a, b, c of 2 general nodes each, every zone
// with testdata/stages.yaml (see the package doc), and the GPU nodes of
// gpuPools.
var (
	reg *region.Region
	// cl reads as the admin and calls as the gateway, whose user alone
	// may read quota.
	cl *busclient.Client
)

// gpuPools are the GPU nodes each zone gets besides its general nodes.
var gpuPools = map[string]testenv.NodePool{
	"zone-a": {Name: "h100", Count: 1, CPU: "32", Memory: "256Gi", GPUs: 3, GPUType: "h100", InstanceType: "p5.48xlarge"},
	"zone-b": {Name: "a100", Count: 2, CPU: "32", Memory: "256Gi", GPUs: 2, GPUType: "a100", InstanceType: "p4d.24xlarge"},
	"zone-c": {Name: "a100", Count: 1, CPU: "32", Memory: "256Gi", GPUs: 2, GPUType: "a100", InstanceType: "p4d.24xlarge"},
}

// addGPUs adds gpuPools to the region's clusters.
func addGPUs(ctx context.Context, e *e2e.Env) error {
	for _, c := range e.Region.Env.Clusters {
		if p, ok := gpuPools[c.Name]; ok {
			if _, err := c.AddNodes(ctx, p); err != nil {
				return fmt.Errorf("add GPU nodes to %s: %w", c.Name, err)
			}
		}
	}
	return nil
}

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "training", GatewayUser: "atoll-training-gateway", Setup: addGPUs,
		Options: region.Options{Nodes: 2, ZoneConfigs: e2e.EveryZone("stages.yaml")}},
		func(e *e2e.Env) { reg, cl = e.Region, e.Client })
}
