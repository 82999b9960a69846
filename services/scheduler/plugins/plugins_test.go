package plugins_test

import (
	"testing"

	"atoll.dev/services/scheduler/plugins"
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
