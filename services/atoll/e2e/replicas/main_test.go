package replicas

import (
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// reg is the suite's region: two replicas of every service, three member
// clusters (zones a, b, c) of nodesPerZone nodes each, and a bus that can
// be restarted.
var reg *region.Region

// nodesPerZone is small so that the Apps the tests place fill a good part
// of each cluster and a double booking would show.
const nodesPerZone = 3

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "replicas", Options: region.Options{Nodes: nodesPerZone, Replicas: 2, RestartableBus: true}}, func(e *e2e.Env) { reg = e.Region })
}
