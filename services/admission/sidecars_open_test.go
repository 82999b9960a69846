package admission

import (
	"testing"
	"time"

	"atoll.dev/libs/api"
)

// TestOpenMore checks how far a moving zone opens: never to more than
// maxUnavailable Apps that are not healthy yet, in key order, and to
// every App once the last is reached.
func TestOpenMore(t *testing.T) {
	keys := []string{"p.app.a", "p.app.b", "p.app.c", "p.app.d", "p.app.e"}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		through  string
		healthy  []string
		max      int
		want     string
		advanced bool
	}{
		{"open to all already", "", nil, 1, "", false},
		{"the open ones are moving: no more", "p.app.b", nil, 2, "p.app.b", false},
		{"one healthy: one more", "p.app.b", []string{"p.app.a"}, 2, "p.app.c", true},
		{"every open one healthy: two more", "p.app.b", []string{"p.app.a", "p.app.b"}, 2, "p.app.d", true},
		{"the next ones healthy already are passed over", "p.app.a", []string{"p.app.a", "p.app.b", "p.app.c"}, 1, "p.app.d", true},
		{"past the last: open to all", "p.app.d", []string{"p.app.a", "p.app.b", "p.app.c", "p.app.d"}, 2, "", true},
		{"an App gone since: the next after its key", "p.app.bb", []string{"p.app.a", "p.app.b"}, 1, "p.app.c", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			healthy := map[string]bool{}
			for _, k := range tt.healthy {
				healthy[k] = true
			}
			z := &api.SidecarZone{Phase: api.SidecarZoneMoving, Through: tt.through}
			openMore(z, keys, healthy, tt.max, now)
			if z.Through != tt.want {
				t.Errorf("through %q, want %q", z.Through, tt.want)
			}
			if got := z.Advanced.Equal(now); got != tt.advanced {
				t.Errorf("advanced %t, want %t", got, tt.advanced)
			}
			open := 0
			for _, k := range keys {
				if z.OpenTo(k) && !healthy[k] {
					open++
				}
			}
			if z.Through != "" && open > tt.max {
				t.Errorf("open to %d Apps not healthy, more than %d", open, tt.max)
			}
		})
	}
}
