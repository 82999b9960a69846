package cronjobdaemon

import (
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
	"atoll.dev/services/propagator"
)

// reg is the suite's region.
var reg *region.Region

// nodesPerZone keeps the clusters small: a Daemon's pods are one per node.
const nodesPerZone = 2

// fenceLease is the region's CronJob fence lease V (api.EnvCronFenceLease,
// 90 s in production): with a move about 10 s after a freeze just past a
// schedule time, fire-from (move + V + api.CronFenceMargin) falls before
// the next minute, so the CronJob's new cluster fires from the first
// schedule time after the move instead of two minutes later; the fence is
// the same rule with a shorter lease.
const fenceLease = 20 * time.Second

// retryMax caps the propagator's retry of a failing delete
// (propagator.EnvRetryMax; 30 s in production): the stale CronJob of the
// cluster that comes back is removed at the first retry after its return,
// not up to half a minute later.
const retryMax = 3 * time.Second

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "cronjobdaemon", Options: region.Options{Nodes: nodesPerZone},
		Env: map[string]string{api.EnvCronFenceLease: fenceLease.String(), propagator.EnvRetryMax: retryMax.String()}},
		func(e *e2e.Env) { reg = e.Region })
}
