// Command aggregator runs the aggregator service: workload status across
// shards and member-cluster inventory and health.
//
// A log session streams at most --max-log-containers containers
// (ATOLL_AGGREGATOR_MAX_LOG_CONTAINERS, default 50).
package main

import (
	"go.uber.org/fx"

	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon"
	"atoll.dev/services/aggregator"
)

func main() {
	var cfg aggregator.Config
	daemon.Run(daemon.Command{
		Service:  "aggregator",
		About:    "folds member-cluster state into workload status and cluster inventory",
		Clusters: true,
		Flags: func(f *daemon.FlagSet) {
			f.Int(&cfg.MaxLogContainers, "max-log-containers", "ATOLL_AGGREGATOR_MAX_LOG_CONTAINERS", aggregator.DefaultMaxLogContainers,
				"how many containers one log session may stream at most; a session over it is refused (422) until narrowed by container, zone or pod")
		},
	},
		fx.Provide(func(c daemon.Config) (clusters.Members, error) { return clusters.Load(c.ClustersFile) }),
		fx.Supply(&cfg),
		aggregator.Module)
}
