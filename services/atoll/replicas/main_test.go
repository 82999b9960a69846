package replicas

import (
	"os"
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// One region for the package: two replicas of every service, three member
// clusters (zones a, b, c) of nodesPerZone nodes each, and a bus that can
// be restarted.
var (
	reg *region.Region
)

// nodesPerZone is small so that the Apps the tests place fill a good part
// of each cluster and a double booking would show.
const nodesPerZone = 3

func TestMain(m *testing.M) {
	os.Exit(e2e.Run(m, e2e.Package{Name: "replicas", Options: region.Options{Nodes: nodesPerZone, Replicas: 2, RestartableBus: true}},
		func(e *e2e.Env) { reg = e.Region }))
}

func needRegion(t *testing.T) {
	t.Helper()
	if reg == nil {
		t.Skip("end-to-end tests need member clusters (not under -short)")
	}
}
