// Command quota runs the quota service: project limits per tier and the
// usage ledger, reserved and released atomically over the bus.
package main

import (
	"atoll.dev/libs/daemon"
	"atoll.dev/services/quota"
)

func main() {
	daemon.Main("quota", "project quota per tier and the usage ledger", false, quota.Module)
}
