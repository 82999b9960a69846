package remediation

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

// nodesPerZone: 40% of a cluster is two nodes.
const nodesPerZone = 5

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "remediation", Options: region.Options{Nodes: nodesPerZone, Replicas: 2, Listen: true}, GatewayUser: "atoll-remediation-e2e-gateway"},
		func(e *e2e.Env) { reg, gwBus, cl = e.Region, e.Gateway, e.Client })
}
