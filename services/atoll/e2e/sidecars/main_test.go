package sidecars

import (
	"testing"

	"atoll.dev/libs/bus"
	"atoll.dev/services/admission"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

// The suite's region: zones a, b, c of 2 nodes each, every zone with the
// in-place image stages (see the package doc).
var (
	reg   *region.Region
	gwBus *bus.Bus
	cl    *busclient.Client
)

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "sidecars", GatewayUser: "atoll-sidecars-gateway",
		Options: region.Options{Nodes: 2, ZoneConfigs: e2e.EveryZone("stages.yaml")},
		// The sidecar rollout looks often and fails a zone soon (zones_test.go).
		Env: map[string]string{admission.EnvSidecarEvery: "250ms", admission.EnvSidecarDeadline: zoneDeadline.String()}},
		func(e *e2e.Env) { reg, gwBus, cl = e.Region, e.Gateway, e.Client })
}
