// Command quota runs the quota service: project limits per tier and the
// usage ledger, reserved and released atomically over the bus.
//
// A project with no limit of its own gets the region's default caps
// (--default-limits, ATOLL_QUOTA_DEFAULT_LIMITS; none is unlimited) and
// may hold at most --max-workloads workloads (ATOLL_QUOTA_MAX_WORKLOADS).
// Every setting is a flag and an environment variable (`quota -h`).
package main

import (
	"fmt"

	"go.uber.org/fx"

	"atoll.dev/libs/api"
	"atoll.dev/libs/daemon"
	"atoll.dev/services/quota"
)

func main() {
	var (
		limits       string
		maxWorkloads int
		cfg          *quota.Config
	)
	daemon.Run(daemon.Command{
		Service: "quota",
		About:   "project quota per tier and the usage ledger",
		Flags: func(f *daemon.FlagSet) {
			f.String(&limits, "default-limits", "ATOLL_QUOTA_DEFAULT_LIMITS", quota.DefaultLimits,
				"caps per tier of a project with no limit of its own: <Tier>:cpu=16,memory=64Gi,gpus=0,pods=100,storage=100Gi;<Tier>:...; a tier or resource left out is 0 (forbidden)")
			f.Int(&maxWorkloads, "max-workloads", "ATOLL_QUOTA_MAX_WORKLOADS", api.DefaultMaxWorkloads, "the most workloads one project may hold")
		},
		Validate: func() error {
			lim, err := quota.ParseLimits(limits)
			if err != nil {
				return fmt.Errorf("--default-limits (ATOLL_QUOTA_DEFAULT_LIMITS): %w", err)
			}
			if maxWorkloads < 1 {
				return fmt.Errorf("--max-workloads (ATOLL_QUOTA_MAX_WORKLOADS) %d: want 1 or more", maxWorkloads)
			}
			cfg = &quota.Config{Defaults: api.QuotaDefaults{Limits: lim, MaxWorkloads: int64(maxWorkloads)}}
			return nil
		},
	},
		fx.Provide(func() *quota.Config { return cfg }),
		quota.Module)
}
