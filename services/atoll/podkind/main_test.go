package podkind

import (
	"os"
	"path/filepath"
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

var reg *region.Region

// nodesPerZone keeps the clusters small.
const nodesPerZone = 2

func TestMain(m *testing.M) {
	// Every zone gets KWOK's default stages plus the in-place image
	// update (see testdata/stages.yaml).
	stages, err := filepath.Abs("testdata/stages.yaml")
	if err != nil {
		panic(err)
	}
	os.Exit(e2e.Run(m, e2e.Package{Name: "podkind", Options: region.Options{Nodes: nodesPerZone,
		ZoneConfigs: map[string][]string{"a": {stages}, "b": {stages}, "c": {stages}}}},
		func(e *e2e.Env) { reg = e.Region }))
}

func needRegion(t *testing.T) {
	t.Helper()
	if reg == nil {
		t.Skip("end-to-end tests need member clusters (not under -short)")
	}
}
