// Command aggregator runs the aggregator service: workload status across
// shards and member-cluster inventory and health.
package main

import (
	"go.uber.org/fx"

	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon"
	"atoll.dev/services/aggregator"
)

func main() {
	daemon.Main("aggregator", "folds member-cluster state into workload status and cluster inventory", true,
		fx.Provide(func(cfg daemon.Config) (clusters.Members, error) { return clusters.Load(cfg.ClustersFile) }),
		aggregator.Module)
}
