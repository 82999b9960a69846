package api

import (
	"strconv"
	"strings"
)

// Availability is an App's availability budget: how much of each shard
// voluntary disruptions (the drains of node remediation and upgrades)
// may take at once. The propagator makes it a PodDisruptionBudget per
// shard. Set one of the two; each is a count ("1") or a percentage of
// the shard's replicas ("25%").
type Availability struct {
	// MaxUnavailable is how many of a shard's replicas may be disrupted
	// at once (Kubernetes rounds a percentage up).
	MaxUnavailable string `json:"maxUnavailable,omitempty"`
	// MinAvailable is how many must stay available (Kubernetes rounds a
	// percentage up); "100%" blocks every drain.
	MinAvailable string `json:"minAvailable,omitempty"`
}

// DefaultMaxUnavailable is the budget of an App without Availability: a
// quarter of each shard, rounded up, so at least one replica may move and
// a drain never blocks forever by default.
const DefaultMaxUnavailable = "25%"

// Budget returns the budget's kind ("maxUnavailable" or "minAvailable")
// and value, the default when a is nil or empty.
func (a *Availability) Budget() (kind, value string) {
	switch {
	case a == nil || (a.MaxUnavailable == "" && a.MinAvailable == ""):
		return "maxUnavailable", DefaultMaxUnavailable
	case a.MinAvailable != "":
		return "minAvailable", a.MinAvailable
	}
	return "maxUnavailable", a.MaxUnavailable
}

func (a *Availability) validate(field string, fe *FieldErrors) {
	if a == nil {
		return
	}
	if a.MaxUnavailable != "" && a.MinAvailable != "" {
		fe.add(field, CodeInvalid, "set maxUnavailable or minAvailable, not both")
	}
	for name, v := range map[string]string{"maxUnavailable": a.MaxUnavailable, "minAvailable": a.MinAvailable} {
		if v != "" && !countOrPercent(v) {
			fe.add(field+"."+name, CodeInvalid, "%q is not a count or a percentage (0%% to 100%%)", v)
		}
	}
}

func countOrPercent(v string) bool {
	if p, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.Atoi(p)
		return err == nil && n >= 0 && n <= 100
	}
	n, err := strconv.Atoi(v)
	return err == nil && n >= 0
}
