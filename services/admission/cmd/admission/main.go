// Command admission runs the admission service: it validates, defaults and
// mutates workloads, asks quota, and persists them.
//
// The platform's managed sidecars and init containers come from the YAML
// file named by --config (ATOLL_ADMISSION_CONFIG; default: a small log
// shipper); the longest grace period a pod may ask for is
// --max-termination-grace-period-seconds
// (ATOLL_ADMISSION_MAX_TERMINATION_GRACE_PERIOD_SECONDS; default 300).
// Every setting is a flag and an environment variable (`admission -h`).
package main

import (
	"fmt"

	"go.uber.org/fx"

	"atoll.dev/libs/api"
	"atoll.dev/libs/daemon"
	"atoll.dev/services/admission"
)

func main() {
	var (
		configFile string
		maxGrace   int
	)
	daemon.Run(daemon.Command{
		Service: "admission",
		About:   "validates, defaults, mutates and persists workloads",
		Flags: func(f *daemon.FlagSet) {
			f.String(&configFile, "config", "ATOLL_ADMISSION_CONFIG", "", "YAML file of the platform's managed sidecars and init containers (default: a small log shipper)")
			f.Int(&maxGrace, "max-termination-grace-period-seconds", "ATOLL_ADMISSION_MAX_TERMINATION_GRACE_PERIOD_SECONDS", api.DefaultMaxTerminationGracePeriodSeconds,
				fmt.Sprintf("the longest grace period a pod may ask for (a template's terminationGracePeriodSeconds, a hook's sleep), in seconds: a workload over it is refused with 422 (at least %d, the default grace period)", api.DefaultTerminationGracePeriodSeconds))
		},
		Validate: func() error {
			if err := admission.CheckMaxTerminationGracePeriod(int64(maxGrace)); err != nil {
				return fmt.Errorf("--max-termination-grace-period-seconds (ATOLL_ADMISSION_MAX_TERMINATION_GRACE_PERIOD_SECONDS): %w", err)
			}
			return nil
		},
	},
		fx.Provide(func() (*admission.Config, error) {
			c, err := admission.LoadConfig(configFile)
			if err != nil {
				return nil, err
			}
			c.MaxTerminationGracePeriodSeconds = int64(maxGrace)
			return c, nil
		}),
		admission.Module)
}
