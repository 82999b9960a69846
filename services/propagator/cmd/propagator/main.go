// Command propagator runs the propagator service: it applies each shard of
// a placement to its member cluster with server-side apply.
package main

import (
	"go.uber.org/fx"

	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon"
	"atoll.dev/services/propagator"
)

func main() {
	daemon.Main("propagator", "applies workload shards to member clusters", true,
		fx.Provide(func(cfg daemon.Config) (clusters.Members, error) { return clusters.Load(cfg.ClustersFile) }),
		propagator.Module)
}
