package region_test

import (
	"testing"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

// One region for the suite: three member clusters (zones a, b, c) with
// 20 nodes each. Tests use their own projects.
//
// Permissions are on. Tests read as the admin (reg.Bus) and call the
// endpoints that answer only the gateway (admission, quota's get and set,
// the aggregator's cluster operations and debug sessions) as the
// gateway's NATS user (gwBus), as the gateway itself does.
var (
	reg   *region.Region
	gwBus *bus.Bus
	cl    *busclient.Client
)

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "e2e", LogToStderr: true, GatewayUser: "atoll-e2e-gateway", Options: region.Options{Nodes: 20}},
		func(e *e2e.Env) { reg, gwBus, cl = e.Region, e.Gateway, e.Client })
}
