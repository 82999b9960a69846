// Command scheduler runs the scheduler service: cluster-level placement of
// workloads with filter and score plugins.
package main

import (
	"atoll.dev/libs/daemon"
	"atoll.dev/services/scheduler"
)

func main() {
	daemon.Main("scheduler", "places workloads on member clusters", false, scheduler.Module)
}
