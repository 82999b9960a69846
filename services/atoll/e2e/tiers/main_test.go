// Package tiers holds the end-to-end tests of resource tiers: preemption
// of Preemptible work for Reserved work and its return, the tier-ordered
// queue, and the burst buffer, on a region of three small member
// clusters (zones a, b, c; nodesPerZone nodes of 16 CPU each), so that a
// few dozen Apps fill it.
package tiers

import (
	"testing"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
	"atoll.dev/services/scheduler"
)

var (
	reg   *region.Region
	gwBus *bus.Bus
	cl    *busclient.Client
)

// nodesPerZone: each cluster has 32 CPU, room for 10 pods of 3 CPU.
const nodesPerZone = 2

// The scheduler keeps what it placed counted until an inventory 5 s after
// the decision: the fill below places pod after pod on full clusters, and
// an inventory computed before a pod is bound would show room that is not
// there (see scheduler.Options.AssumeGrace).
func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "tiers", Options: region.Options{Nodes: nodesPerZone}, GatewayUser: "atoll-tiers-gateway",
		Env: map[string]string{scheduler.EnvAssumeGrace: "5s"}},
		func(e *e2e.Env) { reg, gwBus, cl = e.Region, e.Gateway, e.Client })
}
