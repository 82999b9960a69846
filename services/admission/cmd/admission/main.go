// Command admission runs the admission service: it validates, defaults and
// mutates workloads, asks quota, and persists them.
//
// The platform's managed sidecars and init containers come from the YAML
// file named by --config (ATOLL_ADMISSION_CONFIG; default: a small log
// shipper). Every setting is a flag and an environment variable
// (`admission -h`).
package main

import (
	"go.uber.org/fx"

	"atoll.dev/libs/daemon"
	"atoll.dev/services/admission"
)

func main() {
	var configFile string
	daemon.Run(daemon.Command{
		Service: "admission",
		About:   "validates, defaults, mutates and persists workloads",
		Flags: func(f *daemon.FlagSet) {
			f.String(&configFile, "config", "ATOLL_ADMISSION_CONFIG", "", "YAML file of the platform's managed sidecars and init containers (default: a small log shipper)")
		},
	},
		fx.Provide(func() (*admission.Config, error) { return admission.LoadConfig(configFile) }),
		admission.Module)
}
