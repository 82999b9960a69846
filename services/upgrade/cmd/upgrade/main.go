// Command upgrade runs the upgrade service: rotation plans turn into
// waves of surge, cordon, drain and replace across the member clusters.
package main

import (
	"go.uber.org/fx"

	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon"
	"atoll.dev/services/upgrade"
)

func main() {
	daemon.Main("upgrade", "rotates member clusters' nodes to a new version in SLO-gated waves", true,
		fx.Provide(func(cfg daemon.Config) (clusters.Members, error) { return clusters.Load(cfg.ClustersFile) }),
		upgrade.Module)
}
