// Package plugins registers the scheduler's filters and scorers.
package plugins

import (
	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	"atoll.dev/services/scheduler/plugins/affinity"
	"atoll.dev/services/scheduler/plugins/fit"
	"atoll.dev/services/scheduler/plugins/hardware"
	"atoll.dev/services/scheduler/plugins/health"
	"atoll.dev/services/scheduler/plugins/leastallocated"
	"atoll.dev/services/scheduler/plugins/mostallocated"
	"atoll.dev/services/scheduler/plugins/taints"
	"atoll.dev/services/scheduler/plugins/zonebalance"
)

// Filters are all filters, in the order they run.
var Filters = map[string]func() framework.Filter{
	health.Name:   func() framework.Filter { return health.New() },
	affinity.Name: func() framework.Filter { return affinity.New() },
	taints.Name:   func() framework.Filter { return taints.New() },
	hardware.Name: func() framework.Filter { return hardware.New() },
	fit.Name:      func() framework.Filter { return fit.New() },
}

// FilterOrder is the order filters run and reasons are listed in.
var FilterOrder = []string{health.Name, affinity.Name, taints.Name, hardware.Name, fit.Name}

// Scorers are all scorers.
var Scorers = map[string]func() framework.Scorer{
	leastallocated.Name: func() framework.Scorer { return leastallocated.New() },
	mostallocated.Name:  func() framework.Scorer { return mostallocated.New() },
	zonebalance.Name:    func() framework.Scorer { return zonebalance.New() },
}

// ScorersFor returns the scorers of a tier: Preemptible work is packed,
// Reserved and OnDemand work is spread; all are zone-balanced.
func ScorersFor(t api.Tier) []framework.Scorer {
	if t == api.TierPreemptible {
		return []framework.Scorer{mostallocated.New(), zonebalance.New()}
	}
	return []framework.Scorer{leastallocated.New(), zonebalance.New()}
}
