package quota_test

import (
	"testing"

	"go.uber.org/fx"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/daemon/servicetest"
	"atoll.dev/services/quota"
)

// TestStartStopLeavesNoGoroutine starts and stops the service 20 times in
// one process, as its main composes it, each time until ready, and checks
// that nothing it started is left (servicetest.StartStop).
func TestStartStopLeavesNoGoroutine(t *testing.T) {
	servicetest.StartStop(t, servicetest.StartRegion(t), servicetest.Spec{
		Service: "quota", User: bus.UserQuota, Options: []fx.Option{quota.Module},
	})
}
