package rollout

import (
	"os"
	"path/filepath"
	"testing"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/busclient"
	"atoll.dev/services/atoll/e2e"
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
	stages, err := filepath.Abs("testdata/zone-b-stages.yaml")
	if err != nil {
		panic(err)
	}
	os.Exit(e2e.Run(m, e2e.Package{Name: "rollout", LogToStderr: true, GatewayUser: "atoll-rollout-gateway",
		Options: region.Options{Nodes: 4, ZoneConfigs: map[string][]string{"b": {stages}}}},
		func(e *e2e.Env) { reg, gwBus, cl = e.Region, e.Gateway, e.Client }))
}

func needRegion(t *testing.T) {
	t.Helper()
	if reg == nil {
		t.Skip("end-to-end tests need member clusters (not under -short)")
	}
}
