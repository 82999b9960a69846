package upgrade

import (
	"os"
	"testing"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/busclient"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// One region for the package.
var (
	reg   *region.Region
	gwBus *bus.Bus
	cl    *busclient.Client
)

// nodesPerZone keeps a rotation of the three clusters within minutes.
const nodesPerZone = 3

func TestMain(m *testing.M) {
	os.Exit(e2e.Run(m, e2e.Package{Name: "upgrade", Options: region.Options{Nodes: nodesPerZone, Replicas: 2, Listen: true}, GatewayUser: "atoll-upgrade-e2e-gateway"},
		func(e *e2e.Env) { reg, gwBus, cl = e.Region, e.Gateway, e.Client }))
}

func needRegion(t *testing.T) {
	t.Helper()
	if reg == nil {
		t.Skip("end-to-end tests need member clusters (not under -short)")
	}
}
