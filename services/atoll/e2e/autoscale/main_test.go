package autoscale

import (
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// reg is the suite's region: one replica of every service, three member
// clusters (zones a, b, c) with metrics-server, nodesPerZone nodes each.
var reg *region.Region

// nodesPerZone leaves room for every App the tests scale.
const nodesPerZone = 3

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "autoscale", Options: region.Options{Nodes: nodesPerZone, MetricsServer: true}}, func(e *e2e.Env) { reg = e.Region })
}
