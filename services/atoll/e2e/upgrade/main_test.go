package upgrade

import (
	"testing"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

// The suite's region.
var (
	reg   *region.Region
	gwBus *bus.Bus
	cl    *busclient.Client
)

// nodesPerZone keeps a rotation of the three clusters within minutes.
const nodesPerZone = 3

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "upgrade", Options: region.Options{Nodes: nodesPerZone, Replicas: 2, Listen: true}, GatewayUser: "atoll-upgrade-e2e-gateway"},
		func(e *e2e.Env) { reg, gwBus, cl = e.Region, e.Gateway, e.Client })
}
