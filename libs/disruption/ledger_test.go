package disruption_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/disruption"
)

func openLedger(t *testing.T, clk clock.PassiveClock) *disruption.Ledger {
	t.Helper()
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: t.Name()})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	kv, err := b.KV(ctx, bus.BucketDisruption)
	require.NoError(t, err)
	return disruption.NewLedger(kv, clk)
}

// fleet is a cluster of pools: pool name -> node count, nodes named
// <pool>-<i> with UID u-<pool>-<i>; notReady lists UIDs NotReady.
func fleet(pools map[string]int, notReady ...string) disruption.Fleet {
	f := disruption.Fleet{}
	for p, n := range pools {
		for i := range n {
			f[fmt.Sprintf("u-%s-%d", p, i)] = disruption.FleetNode{Pool: p}
		}
	}
	for _, uid := range notReady {
		n := f[uid]
		n.NotReady = true
		f[uid] = n
	}
	return f
}

func ref(pool string, i int) disruption.NodeRef {
	return disruption.NodeRef{Cluster: "zone-a", Pool: pool, Name: fmt.Sprintf("%s-%d", pool, i), UID: fmt.Sprintf("u-%s-%d", pool, i)}
}

func TestLedgerRefusesASecondOwner(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := openLedger(t, clk)
	ctx := context.Background()
	f := fleet(map[string]int{"general": 5})
	req := func(owner string) disruption.Request {
		return disruption.Request{Node: ref("general", 0), Owner: owner, Reason: "test", TTL: time.Minute,
			Budget: disruption.Budget{Pool: "2"}, Fleet: f}
	}
	_, err := l.Acquire(ctx, req("remediation"))
	require.NoError(t, err)
	_, err = l.Acquire(ctx, req("upgrade"))
	require.ErrorIs(t, err, disruption.ErrHeld)
	require.ErrorContains(t, err, "held by remediation")
	// The owner itself renews (a standby replica of the same service).
	_, err = l.Acquire(ctx, req("remediation"))
	require.NoError(t, err)
	require.ErrorIs(t, l.Renew(ctx, ref("general", 0), "upgrade", time.Minute), disruption.ErrNotHeld)

	// An expired lease no longer holds the node.
	clk.SetTime(clk.Now().Add(61 * time.Second))
	_, err = l.Acquire(ctx, req("upgrade"))
	require.NoError(t, err)
	_, err = l.Acquire(ctx, req("remediation"))
	require.ErrorIs(t, err, disruption.ErrHeld)

	// Released, it is free.
	require.NoError(t, l.Release(ctx, ref("general", 0), "upgrade"))
	require.NoError(t, l.Release(ctx, ref("general", 0), "upgrade"), "releasing twice is fine")
	_, err = l.Acquire(ctx, req("remediation"))
	require.NoError(t, err)
	leases, err := l.Leases(ctx, "zone-a")
	require.NoError(t, err)
	require.Len(t, leases, 1)
	require.Equal(t, "remediation", leases[0].Owner)
}

func TestLedgerRefusesABudgetOverrun(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := openLedger(t, clk)
	// Two pools of 5; budget 1 per pool, 2 per cluster; node general-4 is NotReady.
	f := fleet(map[string]int{"general": 5, "gpu": 5}, "u-general-4")
	b := disruption.Budget{Pool: "1", Cluster: "2"}
	acquire := func(owner string, pool string, i int) error {
		_, err := l.Acquire(ctx, disruption.Request{Node: ref(pool, i), Owner: owner, TTL: time.Hour, Budget: b, Fleet: f})
		return err
	}
	// The NotReady node itself fits: it is counted once.
	require.NoError(t, acquire("remediation", "general", 4))
	// A second node of the pool would make two: refused, for any owner.
	err := acquire("upgrade", "general", 0)
	require.ErrorIs(t, err, disruption.ErrBudget)
	require.ErrorContains(t, err, "pool general: 2 of 5 nodes would be unavailable, budget 1 allows 1")
	// The other pool has room, and the cluster one more.
	require.NoError(t, acquire("upgrade", "gpu", 0))
	err = acquire("upgrade", "gpu", 1)
	require.ErrorIs(t, err, disruption.ErrBudget)
	// Releasing gives the room back.
	require.NoError(t, l.Release(ctx, ref("general", 4), "remediation"))
	f = fleet(map[string]int{"general": 5, "gpu": 5}) // general-4 recovered
	require.NoError(t, acquire("upgrade", "general", 0))
	// Cluster: general-0 and gpu-0 leased = 2 of 2.
	err = acquire("remediation", "general", 1)
	require.ErrorIs(t, err, disruption.ErrBudget)
}

// TestLedgerBrokenNodesTakeTurns: two NotReady nodes of a pool with a
// budget of one are worked on one after the other, never both at once,
// and neither waits forever for the other.
func TestLedgerBrokenNodesTakeTurns(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, nil)
	f := fleet(map[string]int{"general": 5}, "u-general-1", "u-general-2")
	req := func(i int) disruption.Request {
		return disruption.Request{Node: ref("general", i), Owner: "remediation", TTL: time.Hour, Budget: disruption.Budget{Pool: "1"}, Fleet: f}
	}
	_, err := l.Acquire(ctx, req(1))
	require.NoError(t, err)
	_, err = l.Acquire(ctx, req(2))
	require.ErrorIs(t, err, disruption.ErrBudget)
	require.NoError(t, l.Release(ctx, ref("general", 1), "remediation"))
	_, err = l.Acquire(ctx, req(2))
	require.NoError(t, err)
	// A healthy node (an upgrade's) counts the NotReady ones too.
	_, err = l.Acquire(ctx, disruption.Request{Node: ref("general", 0), Owner: "upgrade", TTL: time.Hour, Budget: disruption.Budget{Pool: "2"}, Fleet: f})
	require.ErrorIs(t, err, disruption.ErrBudget, "2 NotReady (one leased) + 1 healthy = 3, more than 2")
}

// TestLedgerBudgetUnderRace: ten owners race for ten nodes of a pool with
// a budget of 3; exactly 3 win.
func TestLedgerBudgetUnderRace(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, nil)
	f := fleet(map[string]int{"general": 10})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  int
		errs []error
	)
	for i := range 10 {
		wg.Go(func() {
			_, err := l.Acquire(ctx, disruption.Request{Node: ref("general", i), Owner: fmt.Sprintf("owner-%d", i), TTL: time.Hour,
				Budget: disruption.Budget{Pool: "3"}, Fleet: f})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !errors.Is(err, disruption.ErrBudget):
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Equal(t, 3, won)
}

func TestLimitRoundsDownNeverBelowOne(t *testing.T) {
	for _, tc := range []struct {
		limit disruption.Limit
		total int
		want  int
	}{
		{"", 10, -1},
		{"2", 10, 2},
		{"0", 10, 0},
		{"20%", 10, 2},
		{"20%", 4, 1},  // 0.8 rounds down to 0, floored at 1
		{"40%", 6, 2},  // 2.4 -> 2
		{"30%", 5, 1},  // 1.5 -> 1
		{"50%", 3, 1},  // 1.5 -> 1
		{"100%", 3, 3}, // all
		{"0%", 3, 0},
		{"20%", 0, 0},
	} {
		t.Run(fmt.Sprintf("%s of %d", tc.limit, tc.total), func(t *testing.T) {
			got, err := tc.limit.Allowed(tc.total)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	for _, bad := range []disruption.Limit{"x", "-1", "101%", "5.5%"} {
		require.Error(t, bad.Validate(), bad)
	}
}

func TestFleetOf(t *testing.T) {
	node := func(uid, pool string, ready corev1.ConditionStatus) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: uid, UID: k8stypes.UID(uid), Labels: map[string]string{disruption.LabelPool: pool}}}
		if ready != "" {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
		}
		return n
	}
	got := disruption.FleetOf([]*corev1.Node{
		node("a", "general", corev1.ConditionTrue),
		node("b", "general", corev1.ConditionFalse),
		node("c", "gpu", corev1.ConditionUnknown),
		node("d", "gpu", ""),
	})
	require.Equal(t, disruption.Fleet{
		"a": {Pool: "general"}, "b": {Pool: "general", NotReady: true},
		"c": {Pool: "gpu", NotReady: true}, "d": {Pool: "gpu", NotReady: true},
	}, got)
}

// TestLedgerBatchesDecideInOrder: AcquireAll grants a wave's requests in
// one write as if one after the other (the budget counts the leases it
// granted before each request, and another owner's), and RenewAll renews
// an owner's leases in one write, reporting those it does not hold.
func TestLedgerBatchesDecideInOrder(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := openLedger(t, clk)
	f := fleet(map[string]int{"general": 10})
	b := disruption.Budget{Pool: "3"}
	_, err := l.Acquire(ctx, disruption.Request{Node: ref("general", 9), Owner: "remediation", TTL: time.Hour, Budget: b, Fleet: f})
	require.NoError(t, err)
	var rs []disruption.Request
	for _, i := range []int{0, 9, 1, 2, 3} {
		rs = append(rs, disruption.Request{Node: ref("general", i), Owner: "upgrade", TTL: time.Minute, Budget: b, Fleet: f})
	}
	got, errs, err := l.AcquireAll(ctx, rs)
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], disruption.ErrHeld, "general-9 is remediation's")
	require.NoError(t, errs[2])
	require.ErrorIs(t, errs[3], disruption.ErrBudget, "general-9, -0 and -1 out: the budget of 3 is spent")
	require.ErrorIs(t, errs[4], disruption.ErrBudget)
	require.Equal(t, "general-1", got[2].Node.Name)
	leases, err := l.Leases(ctx, "zone-a")
	require.NoError(t, err)
	require.Len(t, leases, 3)

	// Nothing granted: nothing written, no error.
	_, errs, err = l.AcquireAll(ctx, rs[3:])
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], disruption.ErrBudget)

	_, _, err = l.AcquireAll(ctx, []disruption.Request{rs[0], {Node: disruption.NodeRef{Cluster: "zone-b", Name: "x", UID: "u-x"}, Owner: "upgrade", Fleet: f}})
	require.ErrorContains(t, err, "in one call")

	// Renewed together: upgrade's two leases live past their first TTL;
	// general-9 is not upgrade's and general-5 is no one's.
	clk.SetTime(clk.Now().Add(50 * time.Second))
	notHeld, err := l.RenewAll(ctx, "zone-a", "upgrade", []disruption.NodeRef{ref("general", 0), ref("general", 1), ref("general", 9), ref("general", 5)}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"u-general-9": true, "u-general-5": true}, notHeld)
	clk.SetTime(clk.Now().Add(50 * time.Second))
	leases, err = l.Leases(ctx, "zone-a")
	require.NoError(t, err)
	require.Len(t, leases, 3, "the renewed leases outlived their first TTL")
}
