package rollout

import (
	"testing"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

// The suite's region: zones a, b, c of 4 nodes each; zone a with KWOK's
// readiness stages, zone b with its failure stage (see the package doc),
// every zone with the in-place image update stage (inplace_test.go).
var (
	reg   *region.Region
	gwBus *bus.Bus
	cl    *busclient.Client
)

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "rollout", LogToStderr: true, GatewayUser: "atoll-rollout-gateway",
		Options: region.Options{Nodes: 4, ZoneConfigs: map[string][]string{
			"a": {e2e.Testdata("zone-a-stages.yaml"), e2e.Testdata("image-update-stage.yaml")},
			"b": {e2e.Testdata("zone-b-stages.yaml"), e2e.Testdata("image-update-stage.yaml")},
			"c": {e2e.Testdata("zone-c-stages.yaml")},
		}}},
		func(e *e2e.Env) { reg, gwBus, cl = e.Region, e.Gateway, e.Client })
}
