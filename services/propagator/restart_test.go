package propagator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// TestRestartPutsNewWorkFirst restarts a propagator in front of a cluster
// that already holds the shards of many workloads, all propagated and
// announced, and submits a new App at once: the App is applied and
// announced within a second, and the replay of the others costs no API
// call and announces nothing twice.
func TestRestartPutsNewWorkFirst(t *testing.T) {
	existing := 10000
	if testing.Short() {
		existing = 1000
	}
	b := openBus(t)
	start := time.Now()
	ws := make([]*api.Workload, existing)
	for i := range ws {
		ws[i] = app(i, 1)
	}
	old := seed(t, b, ws, []string{"zone-a"}, true)
	objs := make([]runtime.Object, len(old))
	for i, sw := range old {
		objs[i] = liveObject(sw, "zone-a")
	}
	c := newFakeCluster("zone-a", objs...)
	t.Logf("seeded %d propagated workloads in %v", existing, time.Since(start).Round(time.Millisecond))

	nw := app(existing, 1)
	sub, err := b.NC.SubscribeSync(bus.EventSubject(nw.Metadata.Project, nw.Kind, nw.Metadata.Name, api.EventPropagated))
	require.NoError(t, err)
	s := newService(b, quietLog(), map[string]clients{"zone-a": c.clientsFor("restarted")})
	restart := time.Now()
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
	t.Logf("restarted in %v (caches filled)", time.Since(restart).Round(time.Millisecond))

	submitted := time.Now()
	seed(t, b, []*api.Workload{nw}, []string{"zone-a"}, false)
	latency := waitEvent(t, sub, 10*time.Second).Sub(submitted)
	t.Logf("new App propagated %v after it was submitted, right after a restart in front of %d shards", latency.Round(time.Millisecond), existing)
	assert.Less(t, latency, time.Second)

	require.Eventually(t, func() bool {
		tt := s.targets["zone-a"].term.Load()
		return tt != nil && tt.replayLeft.Load() == 0
	}, 60*time.Second, 10*time.Millisecond, "the replay ends")
	t.Logf("replay of %d shards done %v after the restart", existing, time.Since(submitted).Round(time.Millisecond))
	writes := c.Writes()
	require.Len(t, writes, 1, "writes: %v", writes)
	assert.Equal(t, "create", writes[0].verb)
	assert.Equal(t, api.Namespace("p")+"/"+nw.Metadata.Name, writes[0].key)
	ev := propagatedEvents(t, b)
	assert.Len(t, ev, existing+1)
	for k, n := range ev {
		if n != 1 {
			t.Errorf("%s announced %d times", k, n)
		}
	}
}
