// Command admission runs the admission service: it validates, defaults and
// mutates workloads, asks quota, and persists them.
package main

import (
	"atoll.dev/libs/daemon"
	"atoll.dev/services/admission"
)

func main() {
	daemon.Main("admission", "validates, defaults, mutates and persists workloads", false, admission.Module)
}
