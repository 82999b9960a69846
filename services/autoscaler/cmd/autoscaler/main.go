// Command autoscaler runs the autoscaler service: it keeps each Scaler's
// App at the replicas its recommender chooses, through admission.
package main

import (
	"atoll.dev/libs/daemon"
	"atoll.dev/services/autoscaler"
)

func main() {
	daemon.Main("autoscaler", "scales Apps by their Scalers", false, autoscaler.Module)
}
