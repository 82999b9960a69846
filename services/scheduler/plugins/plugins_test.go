package plugins_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/plugins"
	"atoll.dev/services/scheduler/plugins/leastallocated"
	"atoll.dev/services/scheduler/plugins/mostallocated"
	"atoll.dev/services/scheduler/plugins/zonebalance"
)

func TestRegistryNamesMatch(t *testing.T) {
	for name, f := range plugins.Filters {
		if got := f().Name(); got != name {
			t.Errorf("filter registered as %s calls itself %s", name, got)
		}
	}
	for name, f := range plugins.Scorers {
		if got := f().Name(); got != name {
			t.Errorf("scorer registered as %s calls itself %s", name, got)
		}
	}
	if len(plugins.FilterOrder) != len(plugins.Filters) {
		t.Errorf("FilterOrder lists %d of %d filters", len(plugins.FilterOrder), len(plugins.Filters))
	}
}

// TestScorersFor: each tier's scorers, made from the registry; a tier
// TierScorers does not list is scored as OnDemand.
func TestScorersFor(t *testing.T) {
	spread := []string{leastallocated.Name, zonebalance.Name}
	tests := []struct {
		tier api.Tier
		want []string
	}{
		{api.TierReserved, spread},
		{api.TierOnDemand, spread},
		{api.TierPreemptible, []string{mostallocated.Name, zonebalance.Name}},
		{"", spread},
		{"Unknown", spread},
	}
	for _, tc := range tests {
		t.Run(string(tc.tier), func(t *testing.T) {
			var got []string
			for _, s := range plugins.ScorersFor(tc.tier) {
				got = append(got, s.Name())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scorers of %q (-want +got):\n%s", tc.tier, diff)
			}
		})
	}
}

// TestEveryScorerIsUsed: every tier is listed, TierScorers names only
// registered scorers, and every registered scorer serves some tier.
func TestEveryScorerIsUsed(t *testing.T) {
	used := map[string]bool{}
	for _, tier := range api.Tiers {
		names, ok := plugins.TierScorers[tier]
		if !ok {
			t.Errorf("tier %s has no scorers in TierScorers", tier)
		}
		for _, name := range names {
			used[name] = true
			if _, ok := plugins.Scorers[name]; !ok {
				t.Errorf("tier %s names scorer %s, which is not registered", tier, name)
			}
		}
	}
	for name := range plugins.Scorers {
		if !used[name] {
			t.Errorf("scorer %s is registered but no tier uses it", name)
		}
	}
}
