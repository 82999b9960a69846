// Package attack is the tenant-boundary attack suite: as a tenant with
// the developer role (and as the services' own NATS users), it tries each
// escape out of the tenant boundary for real against a region, and checks
// that each gets the documented refusal, names the field where there is
// one, and writes nothing (bucket revisions unchanged, no object in any
// member cluster). Each area of the boundary has its own file.
package attack

import (
	"net/http"
	"testing"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

var (
	reg   *region.Region
	gwBus *bus.Bus
	cl    *busclient.Client
	// httpc trusts the region's CA: every request to the gateway goes
	// through it.
	httpc *http.Client
)

// nodesPerZone: room for a 200-replica App over zones a, b, c.
const nodesPerZone = 4

// The region's gateway serves HTTPS (region.Options.TLS) with a
// certificate of the region's own CA, as production does: reach it with
// httpc (reg.HTTPClient()), or sdk.New(reg.GatewayURL, sdk.WithRootCAs(reg.CAPool)).
func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "attack", Options: region.Options{Nodes: nodesPerZone, TLS: true}, GatewayUser: "atoll-attack-gateway"},
		func(e *e2e.Env) { reg, gwBus, cl, httpc = e.Region, e.Gateway, e.Client, e.Region.HTTPClient() })
}
