package propagator

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/testenv"
)

// leaseLog records who holds each cluster's lease, as the replicas' lease
// hooks report it, and what went wrong: a replica taking a lease another
// still held.
type leaseLog struct {
	mu      sync.Mutex
	holding map[string]map[string]bool // mu must be held: cluster -> replicas
	overlap []string                   // mu must be held
}

func newLeaseLog() *leaseLog { return &leaseLog{holding: map[string]map[string]bool{}} }

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

func (l *leaseLog) overlaps() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.overlap...)
}

// TestStandbyTakesOverAClusterFromAKilledHolder runs two replicas in
// front of two member clusters (the leases spread over the replicas) and
// kills the holder of zone-a's lease in the middle of a burst: its bus
// connection is cut without its stop hooks, and its context ends only
// once the standby has taken over, as a process that dies. While zone-a
// has no holder, more Apps arrive and two announced ones are scaled. The
// standby takes zone-a over within 10 s and finishes the work: every
// shard is created once (one Deployment per shard, never deleted, an
// unchanged shard never written again), the scaled shards are applied,
// every state of every workload is announced once, and in each cluster
// the writes of one replica end before those of the next begin.
func TestStandbyTakesOverAClusterFromAKilledHolder(t *testing.T) {
	env := testenv.New(t, testenv.Zones("a", "b")...)
	names := []string{"zone-a", "zone-b"}
	b := openBus(t)
	writes := &writeLog{}
	leases := newLeaseLog()
	start := func(name string) *replica {
		return startReplica(t, b, name, env.Clusters, writes, func(s *Service) { s.Lease.OnChange = leases.hook(name) })
	}
	r1, r2 := start("r1"), start("r2")
	require.Eventually(t, func() bool {
		for _, n := range names {
			if r1.s.Holds(n) == r2.s.Holds(n) {
				return false
			}
		}
		return true
	}, 15*time.Second, 10*time.Millisecond, "each cluster held by one replica")
	holder, standby := r1, r2
	if r2.s.Holds("zone-a") {
		holder, standby = r2, r1
	}
	zoneB := map[bool]string{true: r1.name, false: r2.name}[r1.s.Holds("zone-b")]
	t.Logf("zone-a held by %s; zone-b held by %s", holder.name, zoneB)

	// Two pods per App: a shard of one pod in each cluster. zone-a is every
	// App's announcer (its first cluster).
	const n = 40
	ws := apps(0, n, 2)
	first := seed(t, b, ws[:n/2], names, false)
	var announced []seeded
	require.Eventually(t, func() bool {
		ev, err := propagatedEvents(b)
		if err != nil {
			return false
		}
		announced = announced[:0]
		for _, sw := range first {
			if ev[sw.w.Key()] == 1 {
				announced = append(announced, sw)
			}
		}
		return len(announced) >= 3
	}, 60*time.Second, 10*time.Millisecond, "the first Apps announced")

	killed := time.Now()
	holder.conn.NC.Close()
	later := seed(t, b, ws[n/2:], names, false)
	// Scale two announced Apps: a new generation, a new placement.
	var scaled []*api.Workload
	for _, sw := range announced[:2] {
		w := app(sw.w.Metadata.Name, 4)
		w.Metadata.Generation = 2
		scaled = append(scaled, w)
	}
	rescaled := seed(t, b, scaled, names, false)
	require.Eventually(t, func() bool { return standby.s.Holds("zone-a") }, 15*time.Second, 10*time.Millisecond)
	takeover := time.Since(killed)
	t.Logf("zone-a taken over by %s %v after its holder %s was killed", standby.name, takeover.Round(time.Millisecond), holder.name)
	assert.Less(t, takeover, 10*time.Second)
	holder.s.Stop() // the dead process's context ends
	require.Eventually(t, func() bool { return standby.s.Holds("zone-b") }, 15*time.Second, 10*time.Millisecond)

	want := map[string]seeded{}
	for _, sw := range append(append(first, later...), rescaled...) {
		want[sw.w.Key()] = sw // the last write of each key wins
	}
	ctx := context.Background()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		ev, err := propagatedEvents(b)
		if !assert.NoError(ct, err) {
			return
		}
		for key, sw := range want {
			// One event for each placement.
			assert.Equal(ct, int(sw.w.Metadata.Generation), ev[key], "propagated events of %s", key)
		}
		assert.Len(ct, ev, len(want), "workloads announced")
		for _, c := range env.Clusters {
			ds, err := listDeployments(ctx, c)
			if !assert.NoError(ct, err) {
				return
			}
			assert.Len(ct, ds, len(want), "Deployments in %s", c.Name)
			for key, sw := range want {
				d, ok := ds[sw.w.Metadata.Name]
				if !assert.True(ct, ok, "%s has no Deployment in %s", key, c.Name) {
					continue
				}
				o, err := rendered(sw, c.Name)
				if !assert.NoError(ct, err) {
					continue
				}
				assert.Equal(ct, o.hash, d.Annotations[AnnoSpecHash], "%s in %s", key, c.Name)
				assert.Equal(ct, sw.p.Shards[0].Replicas, *d.Spec.Replicas, "%s in %s", key, c.Name)
			}
		}
	}, 60*time.Second, 100*time.Millisecond, "every shard applied and every state announced once")

	assert.Empty(t, leases.overlaps(), "a lease held by two replicas at once")
	wantNames := map[string]bool{}
	for _, sw := range want {
		wantNames[sw.w.Metadata.Name] = true
	}
	scaledNames := map[string]bool{}
	for _, w := range scaled {
		scaledNames[w.Metadata.Name] = true
	}
	for _, cl := range names {
		ws := writes.of(cl)
		checkOneWriterAtATime(t, cl, ws, holder.name)
		creates, applies, namespaces, budgets := 0, 0, 0, 0
		budgetPrefix := "/apis/policy/v1/namespaces/" + api.Namespace("p") + "/poddisruptionbudgets/"
		for _, w := range ws {
			name, ok := w.deployment()
			budget, isBudget := strings.CutPrefix(w.path, budgetPrefix)
			switch {
			case !ok && w.namespaceSetup("p"):
				namespaces++
			case isBudget && w.method == http.MethodPatch && wantNames[budget]:
				// A shard's PodDisruptionBudget, applied with its Deployment.
				budgets++
			case !ok:
				t.Errorf("%s: an unexpected write: %v", cl, w)
			case w.created():
				creates++
			case w.method == http.MethodPost:
				t.Errorf("%s: a create that created nothing: %v", cl, w)
			case w.method == http.MethodDelete:
				t.Errorf("%s: a Deployment deleted: %v", cl, w)
			case w.method == http.MethodPatch && scaledNames[name]:
				applies++
			default:
				t.Errorf("%s: a write to a shard that did not change: %v", cl, w)
			}
		}
		// Every create answered 201 made a Deployment of its own and none
		// was deleted: as many creates as Deployments means each shard
		// was created exactly once.
		assert.Equal(t, len(want), creates, "%s: Deployments created", cl)
		assert.NotZero(t, applies, "%s: the scaled shards applied", cl)
		assert.GreaterOrEqual(t, budgets, len(want), "%s: a PodDisruptionBudget applied for every shard", cl)
		t.Logf("%s: %d writes: %d Deployments created, %d requests applying the scaled ones, %d applying the namespace, %d applying budgets", cl, len(ws), creates, applies, namespaces, budgets)
	}
}

// checkOneWriterAtATime checks the writes to one cluster, in the order
// they were sent: the writer changes at most once, from the killed
// replica, and every write of the one before ended (answered or given up)
// before the first of the next was sent.
func checkOneWriterAtATime(t *testing.T, cluster string, ws []write, killed string) {
	t.Helper()
	switches := 0
	for i := 1; i < len(ws); i++ {
		if ws[i].replica == ws[i-1].replica {
			continue
		}
		switches++
		assert.Equal(t, killed, ws[i-1].replica, "%s: %s wrote before %s", cluster, ws[i-1].replica, ws[i].replica)
		var lastEnd time.Time
		for _, w := range ws[:i] {
			if w.end.After(lastEnd) {
				lastEnd = w.end
			}
		}
		assert.True(t, lastEnd.Before(ws[i].start), "%s: %s wrote until %v, %s from %v", cluster, ws[i-1].replica, lastEnd, ws[i].replica, ws[i].start)
		t.Logf("%s: writer %s -> %s, %v between the last write of one and the first of the other", cluster, ws[i-1].replica, ws[i].replica, ws[i].start.Sub(lastEnd).Round(time.Millisecond))
	}
	assert.LessOrEqual(t, switches, 1, "%s: writers alternated", cluster)
}

// TestReadyBeforeFilledCampaignsAfter: a replica whose mirrors cannot
// fill yet (its connection's replay slot is held) is ready, answers its
// endpoints "filling", and takes no cluster's lease; once the slot is
// let go it fills, takes the lease and applies what was seeded.
func TestReadyBeforeFilledCampaignsAfter(t *testing.T) {
	env := testenv.New(t, testenv.Zones("a")...)
	b := openBus(t)
	sws := seed(t, b, apps(0, 3, 1), []string{"zone-a"}, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var release func()
	leases := newLeaseLog()
	held := func() bool {
		leases.mu.Lock()
		defer leases.mu.Unlock()
		return len(leases.holding["zone-a"]) > 0
	}
	r := startReplica(t, b, "r1", env.Clusters, &writeLog{}, func(s *Service) {
		s.Lease.OnChange = leases.hook("r1")
		var err error
		release, err = s.bus.LoadSlot(ctx)
		require.NoError(t, err)
	})
	require.NoError(t, r.s.Ready(ctx), "ready while filling")
	assert.False(t, r.s.Filled())
	short, done := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := r.s.removeProject(short, api.ProjectRef{Project: "gone"}, nil)
	done()
	assert.ErrorContains(t, err, "filling")
	// A free lease is taken at a replica's first attempt: for 2 s, none.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		require.False(t, held(), "a lease taken before the caches filled")
		time.Sleep(20 * time.Millisecond)
	}
	release()
	require.Eventually(t, func() bool { return r.s.Filled() && held() && r.s.Holds("zone-a") }, 30*time.Second, 10*time.Millisecond)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		ds, err := listDeployments(ctx, env.Clusters[0])
		if assert.NoError(ct, err) {
			assert.Len(ct, ds, len(sws))
		}
	}, 60*time.Second, 50*time.Millisecond, "the seeded Apps applied")
}
