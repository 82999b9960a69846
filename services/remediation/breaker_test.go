package remediation

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBreakerRoundingAndCooldown: MaxUnhealthy 30% rounds down and never
// below one: 1 of 3 (allowed 1) stays closed; 2 of 5 (40%, allowed 1)
// opens; 3 of 10 (allowed 3) stays closed. An open breaker closes only a
// cooldown after its domain is back within the limit.
func TestBreakerRoundingAndCooldown(t *testing.T) {
	now := time.Unix(0, 0)
	b := Breakers{}
	update := func(c map[string]Count) {
		t.Helper()
		_, err := b.Update(c, "30%", time.Minute, now)
		require.NoError(t, err)
	}
	update(map[string]Count{"pool/small": {1, 3}, "pool/five": {2, 5}, "pool/ten": {3, 10}})
	require.Empty(t, b.Blocking("pool/small"))
	require.Empty(t, b.Blocking("pool/ten"))
	require.Contains(t, b.Blocking("pool/five"), "open: 2 of 5 nodes unhealthy, more than 1")

	now = now.Add(10 * time.Second)
	update(map[string]Count{"pool/five": {1, 5}})
	require.Contains(t, b.Blocking("pool/five"), "cooling down")
	now = now.Add(59 * time.Second)
	update(map[string]Count{"pool/five": {1, 5}})
	require.NotEmpty(t, b.Blocking("pool/five"))
	// Unhealthy again while cooling: open, and the cooldown starts over.
	now = now.Add(time.Second)
	update(map[string]Count{"pool/five": {2, 5}})
	require.Contains(t, b.Blocking("pool/five"), "open")
	now = now.Add(time.Second)
	update(map[string]Count{"pool/five": {1, 5}})
	now = now.Add(time.Minute)
	update(map[string]Count{"pool/five": {1, 5}})
	require.Empty(t, b.Blocking("pool/five"), "closed a cooldown after recovery")
}
