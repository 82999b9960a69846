package stateful

import (
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// reg is the suite's region.
var reg *region.Region

// nodesPerZone keeps the clusters small.
const nodesPerZone = 2

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "stateful", Options: region.Options{Nodes: nodesPerZone}},
		func(e *e2e.Env) { reg = e.Region })
}
