// Command remediation runs the remediation service: sick nodes become
// cordons, drains and replacements, with rate limits, storm breakers and
// the disruption ledger.
package main

import (
	"go.uber.org/fx"

	"atoll.dev/libs/clusters"
	"atoll.dev/libs/daemon"
	"atoll.dev/services/remediation"
)

func main() {
	daemon.Main("remediation", "turns node health signals into cordon, drain and replace", true,
		fx.Provide(func(cfg daemon.Config) (clusters.Members, error) { return clusters.Load(cfg.ClustersFile) }),
		remediation.Module)
}
