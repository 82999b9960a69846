package cronjobdaemon

import (
	"os"
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

var (
	reg *region.Region
)

// nodesPerZone keeps the clusters small: a Daemon's pods are one per node.
const nodesPerZone = 2

func TestMain(m *testing.M) {
	os.Exit(e2e.Run(m, e2e.Package{Name: "cronjobdaemon", Options: region.Options{Nodes: nodesPerZone}},
		func(e *e2e.Env) { reg = e.Region }))
}

func needRegion(t *testing.T) {
	t.Helper()
	if reg == nil {
		t.Skip("end-to-end tests need member clusters (not under -short)")
	}
}
