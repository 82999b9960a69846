package remediation

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"atoll.dev/libs/disruption"
)

// BreakerState is one failure domain's storm breaker.
type BreakerState struct {
	// Domain is "pool/<pool>", "cluster/<cluster>" or "zone/<zone>".
	Domain    string `json:"domain"`
	Unhealthy int    `json:"unhealthy"`
	Total     int    `json:"total"`
	// Allowed is MaxUnhealthy of Total (percentages round down, never
	// below one).
	Allowed int  `json:"allowed"`
	Open    bool `json:"open"`
	// OpenedAt is when it last opened; CoolingUntil, while the domain is
	// back within Allowed, when it closes.
	OpenedAt     time.Time `json:"openedAt,omitzero"`
	CoolingUntil time.Time `json:"coolingUntil,omitzero"`
}

// Breakers are the storm breakers of one cluster's failure domains.
type Breakers map[string]*BreakerState

// Count is one domain's node counts at a moment.
type Count struct{ Unhealthy, Total int }

// Update opens every domain with more unhealthy nodes than limit allows,
// and closes a domain Cooldown after it is back within it. It returns the
// domains whose state changed.
func (b Breakers) Update(counts map[string]Count, limit disruption.Limit, cooldown time.Duration, now time.Time) ([]string, error) {
	var changed []string
	for d := range b {
		if _, ok := counts[d]; !ok {
			counts[d] = Count{}
		}
	}
	for _, d := range slices.Sorted(maps.Keys(counts)) {
		c := counts[d]
		allowed, err := limit.Allowed(c.Total)
		if err != nil {
			return nil, fmt.Errorf("maxUnhealthy: %w", err)
		}
		st, ok := b[d]
		if !ok {
			st = &BreakerState{Domain: d}
			b[d] = st
		}
		wasOpen := st.Open
		st.Unhealthy, st.Total, st.Allowed = c.Unhealthy, c.Total, allowed
		switch {
		case allowed >= 0 && c.Unhealthy > allowed:
			if !st.Open {
				st.OpenedAt = now
			}
			st.Open, st.CoolingUntil = true, time.Time{}
		case st.Open && st.CoolingUntil.IsZero():
			st.CoolingUntil = now.Add(cooldown)
		case st.Open && !now.Before(st.CoolingUntil):
			st.Open, st.CoolingUntil = false, time.Time{}
		}
		if st.Open != wasOpen {
			changed = append(changed, d)
		}
		if !st.Open && c.Total == 0 {
			delete(b, d)
		}
	}
	return changed, nil
}

// Blocking names the open breakers among domains, "" when none is.
func (b Breakers) Blocking(domains ...string) string {
	for _, d := range domains {
		if st, ok := b[d]; ok && st.Open {
			if !st.CoolingUntil.IsZero() {
				return fmt.Sprintf("storm breaker %s cooling down until %s", d, st.CoolingUntil.Format(time.RFC3339))
			}
			return fmt.Sprintf("storm breaker %s open: %d of %d nodes unhealthy, more than %d", d, st.Unhealthy, st.Total, st.Allowed)
		}
	}
	return ""
}

// List is the breakers sorted by domain.
func (b Breakers) List() []BreakerState {
	out := make([]BreakerState, 0, len(b))
	for _, d := range slices.Sorted(maps.Keys(b)) {
		out = append(out, *b[d])
	}
	return out
}
