package propagator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

type replica struct {
	name string
	s    *Service
	conn *bus.Bus
}

// leaseLog fails a test when two replicas hold one cluster's lease at once.
type leaseLog struct {
	mu      sync.Mutex
	holding map[string]map[string]bool // cluster -> replicas
	overlap []string
}

func (l *leaseLog) hook(replica string) func(string, bool) {
	return func(lease string, held bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		c := strings.TrimPrefix(lease, LeasePrefix)
		if l.holding[c] == nil {
			l.holding[c] = map[string]bool{}
		}
		if held && len(l.holding[c]) > 0 {
			l.overlap = append(l.overlap, fmt.Sprintf("%s took %s while %v held it", replica, c, l.holding[c]))
		}
		if held {
			l.holding[c][replica] = true
		} else {
			delete(l.holding[c], replica)
		}
	}
}

// TestStandbyTakesOverAClusterFromAKilledHolder runs two replicas in
// front of two clusters (leases spread over the replicas), kills the
// holder of zone-a's lease in the middle of a burst (its bus connection
// cut, no stop hooks; the process lives on until the standby has taken
// over) and checks that the standby takes the cluster over and finishes
// the work: every shard applied, every workload announced once, and never
// two replicas writing to one cluster.
func TestStandbyTakesOverAClusterFromAKilledHolder(t *testing.T) {
	b := openBus(t)
	names := []string{"zone-a", "zone-b"}
	fcs := map[string]*fakeCluster{}
	for _, n := range names {
		fcs[n] = newFakeCluster(n)
	}
	leases := &leaseLog{holding: map[string]map[string]bool{}}
	start := func(name string) *replica {
		conn, err := b.Connect("propagator-" + name)
		require.NoError(t, err)
		t.Cleanup(conn.Close)
		cs := map[string]clients{}
		for n, c := range fcs {
			cs[n] = c.clientsFor(name)
		}
		s := newService(conn, quietLog(), cs)
		s.Lease.OnChange = leases.hook(name)
		require.NoError(t, s.Start(context.Background()))
		t.Cleanup(s.Stop)
		return &replica{name: name, s: s, conn: conn}
	}
	r1, r2 := start("r1"), start("r2")
	require.Eventually(t, func() bool {
		for _, n := range names {
			if r1.s.Holds(n) == r2.s.Holds(n) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "each cluster held by one replica")
	holder, standby := r1, r2
	if r2.s.Holds("zone-a") {
		holder, standby = r2, r1
	}
	t.Logf("zone-a held by %s; zone-b held by %s", holder.name, map[bool]string{true: r1.name, false: r2.name}[r1.s.Holds("zone-b")])

	const n = 40
	ws := make([]*api.Workload, n)
	for i := range ws {
		ws[i] = app(i, 2)
	}
	all := seed(t, b, ws[:n/2], names, false)
	require.Eventually(t, func() bool { return len(propagatedEvents(t, b)) >= 3 }, 10*time.Second, 5*time.Millisecond)

	killed := time.Now()
	holder.conn.NC.Close()
	all = append(all, seed(t, b, ws[n/2:], names, false)...)
	require.Eventually(t, func() bool { return standby.s.Holds("zone-a") }, 15*time.Second, 10*time.Millisecond)
	takeover := time.Since(killed)
	t.Logf("zone-a taken over %v after its holder was killed", takeover.Round(time.Millisecond))
	assert.Less(t, takeover, 10*time.Second)
	holder.s.Stop() // the dead process's context ends

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ev := propagatedEvents(t, b)
		for _, sw := range all {
			assert.Equal(c, 1, ev[sw.w.Key()], "propagated events of %s", sw.w.Key())
			for _, cl := range names {
				want := liveObject(sw, cl).Annotations[AnnoSpecHash]
				got, err := fcs[cl].meta.Tracker().Get(deployments, api.Namespace("p"), sw.w.Metadata.Name)
				if assert.NoError(c, err, "%s in %s", sw.w.Key(), cl) {
					assert.Equal(c, want, got.(metav1.Object).GetAnnotations()[AnnoSpecHash], "%s in %s", sw.w.Key(), cl)
				}
			}
		}
	}, 30*time.Second, 50*time.Millisecond, "every shard applied and every workload announced once")

	leases.mu.Lock()
	assert.Empty(t, leases.overlap)
	leases.mu.Unlock()
	for _, cl := range names {
		writes := fcs[cl].Writes()
		switches := 0
		for i := 1; i < len(writes); i++ {
			if writes[i].replica != writes[i-1].replica {
				switches++
				assert.Equal(t, holder.name, writes[i-1].replica, "%s: %s wrote after %s", cl, writes[i-1].replica, writes[i].replica)
			}
		}
		assert.LessOrEqual(t, switches, 1, "%s: writers alternated", cl)
		t.Logf("%s: %d writes, %d change of writer", cl, len(writes), switches)
	}
}
