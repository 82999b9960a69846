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

// TierScorers names the scorers of each tier, from Scorers: Preemptible
// work is packed, Reserved and OnDemand work is spread; all are
// zone-balanced.
var TierScorers = map[api.Tier][]string{
	api.TierReserved:    {leastallocated.Name, zonebalance.Name},
	api.TierOnDemand:    {leastallocated.Name, zonebalance.Name},
	api.TierPreemptible: {mostallocated.Name, zonebalance.Name},
}

// ScorersFor returns the scorers of tier t (TierScorers), made from the
// registry; a tier it does not list is scored as OnDemand.
func ScorersFor(t api.Tier) []framework.Scorer {
	names, ok := TierScorers[t]
	if !ok {
		names = TierScorers[api.TierOnDemand]
	}
	out := make([]framework.Scorer, 0, len(names))
	for _, name := range names {
		out = append(out, Scorers[name]())
	}
	return out
}
