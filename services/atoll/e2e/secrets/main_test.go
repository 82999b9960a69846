package secrets

import (
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

// reg is the suite's region: every service a process, zones a, b, c of
// one node each.
var reg *region.Region

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "secrets", Processes: true, Options: region.Options{Zones: []string{"a", "b", "c"}, Nodes: 1}},
		func(e *e2e.Env) { reg = e.Region })
}
