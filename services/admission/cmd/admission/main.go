// Command admission runs the admission service: it validates, defaults and
// mutates workloads, asks quota, and persists them.
//
// The platform's managed sidecars and init containers come from the YAML
// file named by ATOLL_ADMISSION_CONFIG (default: a small log shipper).
package main

import (
	"os"

	"go.uber.org/fx"

	"atoll.dev/libs/daemon"
	"atoll.dev/services/admission"
)

func main() {
	daemon.Main("admission", "validates, defaults, mutates and persists workloads", false,
		fx.Provide(func() (*admission.Config, error) { return admission.LoadConfig(os.Getenv("ATOLL_ADMISSION_CONFIG")) }),
		admission.Module)
}
