package podkind

import (
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// reg is the suite's region: every zone gets KWOK's default stages plus
// the in-place image update (see testdata/stages.yaml).
var reg *region.Region

// nodesPerZone keeps the clusters small.
const nodesPerZone = 2

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "podkind", Options: region.Options{Nodes: nodesPerZone, ZoneConfigs: e2e.EveryZone("stages.yaml")}},
		func(e *e2e.Env) { reg = e.Region })
}
