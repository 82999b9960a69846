package upgrade

import (
	"testing"
	"time"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
	"atoll.dev/services/upgrade"
)

// The suite's region.
var (
	reg   *region.Region
	gwBus *bus.Bus
	cl    *busclient.Client
)

// nodesPerZone keeps a rotation of the three clusters within minutes.
const nodesPerZone = 3

// tick is how often the upgrade leader moves its plans here
// (upgrade.EnvTick; upgrade.Tick, 1 s, in production): a node's cordon,
// drain, replacement and release each wait for a tick, and KWOK's nodes
// and pods answer in less, so a wave takes the tick's multiples, not the
// clusters' work. The plans' soaks and deadlines are their own.
const tick = 250 * time.Millisecond

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "upgrade", Options: region.Options{Nodes: nodesPerZone, Replicas: 2, Listen: true}, GatewayUser: "atoll-upgrade-e2e-gateway",
		Env: map[string]string{upgrade.EnvTick: tick.String()}},
		func(e *e2e.Env) { reg, gwBus, cl = e.Region, e.Gateway, e.Client })
}
