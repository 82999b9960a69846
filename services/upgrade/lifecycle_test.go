package upgrade_test

import (
	"testing"

	"go.uber.org/fx"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon/servicetest"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/upgrade"
)

// TestStartStopLeavesNoGoroutine starts and stops the service 20 times in
// one process, as its main composes it, each time until ready, and checks
// that nothing it started is left (servicetest.StartStop): with no member
// cluster, as a region without one, and with one, whose connections it
// closes on stop. The member cluster is started once for the 20 cycles
// (and not under -short).
func TestStartStopLeavesNoGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members func(*testing.T) clusters.Members
	}{
		{"no member", func(*testing.T) clusters.Members { return nil }},
		{"one member", oneMember},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servicetest.StartStop(t, servicetest.StartRegion(t), servicetest.Spec{
				Service: "upgrade", User: bus.UserUpgrade, Options: []fx.Option{fx.Supply(tc.members(t)), upgrade.Module},
			})
		})
	}
}

// oneMember starts a member cluster for the test.
func oneMember(t *testing.T) clusters.Members {
	c := testenv.New(t, testenv.Zones("a")...).Clusters[0]
	return clusters.Members{{Name: c.Name, Zone: c.Zone, Kubeconfig: c.Kubeconfig}}
}
