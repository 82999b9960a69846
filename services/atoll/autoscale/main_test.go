package autoscale

import (
	"os"
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// One region for the package: one replica of every service, three member
// clusters (zones a, b, c) with metrics-server, nodesPerZone nodes each.
var (
	reg *region.Region
)

// nodesPerZone leaves room for every App the tests scale.
const nodesPerZone = 3

func TestMain(m *testing.M) {
	os.Exit(e2e.Run(m, e2e.Package{Name: "autoscale", Options: region.Options{Nodes: nodesPerZone, MetricsServer: true}},
		func(e *e2e.Env) { reg = e.Region }))
}

func needRegion(t *testing.T) {
	t.Helper()
	if reg == nil {
		t.Skip("end-to-end tests need member clusters (not under -short)")
	}
}
