package remediation_test

import (
	"testing"

	"go.uber.org/fx"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon/servicetest"
	"atoll.dev/services/remediation"
)

// TestStartStopLeavesNoGoroutine starts and stops the service 20 times in
// one process, as its main composes it, each time until ready, and checks
// that nothing it started is left (servicetest.StartStop).
// It runs with no member cluster, as a region without one does.
func TestStartStopLeavesNoGoroutine(t *testing.T) {
	servicetest.StartStop(t, servicetest.StartRegion(t), servicetest.Spec{
		Service: "remediation", User: bus.UserRemediation, Options: []fx.Option{fx.Supply(clusters.Members(nil)), remediation.Module},
	})
}
