// Package apps holds the end-to-end tests of Apps that serve: the
// container model of a real service (probes, hooks, grace period), the
// platform's identity in every pod, a Service per App in every member
// cluster it runs in, and its region-wide address (managed
// EndpointSlices carrying the other clusters' ready endpoints), on a
// region of three member clusters (zones a, b, c) whose KWOK stages add
// pod-unready (testdata/unready-stages.yaml): a pod labelled
// unready.stage.kwok.x-k8s.io=true turns not ready, as on a failing
// readiness probe.
package apps

import (
	"testing"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

var (
	reg   *region.Region
	gwBus *bus.Bus
	cl    *busclient.Client
)

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "apps", GatewayUser: "atoll-apps-gateway",
		Options: region.Options{Nodes: 2, ZoneConfigs: e2e.EveryZone("unready-stages.yaml")}},
		func(e *e2e.Env) { reg, gwBus, cl = e.Region, e.Gateway, e.Client })
}
