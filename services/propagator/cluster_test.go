package propagator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/testenv"
)

// TestTakeoverOnAMemberCluster is TestStandbyTakesOverAClusterFromAKilledHolder
// against a real member cluster: the real informers, creates and
// server-side applies. Two replicas, one cluster; the holder is killed
// (its bus connection cut) after the first workloads, while more arrive
// and two of the first are scaled; the standby takes over, applies only
// what changed and announces every state once.
func TestTakeoverOnAMemberCluster(t *testing.T) {
	env := testenv.New(t, testenv.Zones("a")...)
	c := env.Clusters[0]
	members := clusters.Members{{Name: c.Name, Zone: c.Zone, Kubeconfig: c.Kubeconfig}}
	b := openBus(t)
	leases := &leaseLog{holding: map[string]map[string]bool{}}
	start := func(name string) *replica {
		conn, err := b.Connect("propagator-" + name)
		require.NoError(t, err)
		t.Cleanup(conn.Close)
		s, err := New(conn, quietLog(), members)
		require.NoError(t, err)
		s.Lease.OnChange = leases.hook(name)
		require.NoError(t, s.Start(context.Background()))
		t.Cleanup(s.Stop)
		return &replica{name: name, s: s, conn: conn}
	}
	r1, r2 := start("r1"), start("r2")
	require.Eventually(t, func() bool { return r1.s.Holds(c.Name) != r2.s.Holds(c.Name) }, 10*time.Second, 10*time.Millisecond)
	holder, standby := r1, r2
	if r2.s.Holds(c.Name) {
		holder, standby = r2, r1
	}

	const n = 20
	ws := make([]*api.Workload, n)
	for i := range ws {
		ws[i] = app(i, 1)
	}
	names := []string{c.Name}
	first := seed(t, b, ws[:n/2], names, false)
	var announced []seeded
	require.Eventually(t, func() bool {
		ev := propagatedEvents(t, b)
		announced = announced[:0]
		for _, sw := range first {
			if ev[sw.w.Key()] == 1 {
				announced = append(announced, sw)
			}
		}
		return len(announced) >= 2
	}, 60*time.Second, 10*time.Millisecond)

	killed := time.Now()
	holder.conn.NC.Close()
	later := seed(t, b, ws[n/2:], names, false)
	// Scale two announced Apps: a new generation, a new placement.
	var scaled []*api.Workload
	for _, sw := range announced[:2] {
		w := app(0, 2)
		w.Metadata = sw.w.Metadata
		w.Metadata.Generation = 2
		scaled = append(scaled, w)
	}
	rescaled := seed(t, b, scaled, names, false)
	require.Eventually(t, func() bool { return standby.s.Holds(c.Name) }, 15*time.Second, 10*time.Millisecond)
	t.Logf("%s taken over %v after its holder was killed", c.Name, time.Since(killed).Round(time.Millisecond))
	holder.s.Stop()

	want := map[string]seeded{}
	for _, sw := range append(append(first, later...), rescaled...) {
		want[sw.w.Key()] = sw // the last write of each key wins
	}
	ctx := context.Background()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		ev := propagatedEvents(t, b)
		for key, sw := range want {
			events := 1
			if sw.w.Metadata.Generation == 2 {
				events = 2 // one for each placement
			}
			assert.Equal(ct, events, ev[key], "propagated events of %s", key)
			d, err := c.Client.AppsV1().Deployments(api.Namespace("p")).Get(ctx, sw.w.Metadata.Name, metav1.GetOptions{})
			if !assert.NoError(ct, err, key) {
				continue
			}
			assert.Equal(ct, liveObject(sw, c.Name).Annotations[AnnoSpecHash], d.Annotations[AnnoSpecHash], key)
			assert.Equal(ct, sw.p.Shards[0].Replicas, *d.Spec.Replicas, key)
		}
	}, 60*time.Second, 100*time.Millisecond, "every shard applied and every state announced once")
	leases.mu.Lock()
	defer leases.mu.Unlock()
	assert.Empty(t, leases.overlap)
}
