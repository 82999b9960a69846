package lease_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus/lease"
)

// A replica that starts after another has taken every lease of a shared
// group gets its share: the holder gives leases back one at a time, and
// no lease ever has two replicas acting at once. When the newcomer stops,
// the first replica takes them all again, and no presence key is left.
func TestSharedLeasesAreRebalancedToANewReplica(t *testing.T) {
	b := openBus(t)
	kv := leases(t, b)
	const group, n = "propagator", 4
	names := make([]string, n)
	acts := make([]*actors, n) // one per lease: an overlap is two replicas acting under it
	for i := range names {
		names[i] = fmt.Sprintf("propagator.zone-%c", 'a'+i)
		acts[i] = newActors()
	}
	run := func(ctx context.Context, wg *sync.WaitGroup, e *lease.Elector) {
		for i, name := range names {
			wg.Go(func() { e.RunShared(ctx, group, name, acts[i].fn(e.Holder())) })
		}
	}
	held := func(e *lease.Elector) int { return len(e.HeldNames()) }

	ea, err := lease.NewElector(kv, "a", fast)
	require.NoError(t, err)
	eb, err := lease.NewElector(kv, "b", fast)
	require.NoError(t, err)
	actx, stopA := context.WithCancel(context.Background())
	bctx, stopB := context.WithCancel(context.Background())
	defer stopA()
	defer stopB()
	var wa, wb sync.WaitGroup
	run(actx, &wa, ea)
	require.Eventually(t, func() bool { return held(ea) == n }, 10*time.Second, 10*time.Millisecond, "a alone takes every lease")

	joined := time.Now()
	run(bctx, &wb, eb)
	require.Eventually(t, func() bool { return held(ea) == n/2 && held(eb) == n/2 }, 20*time.Second, 10*time.Millisecond,
		"leases shared 2 and 2 (a holds %v, b holds %v)", ea.HeldNames(), eb.HeldNames())
	t.Logf("shared %d/%d %v after the second replica joined (TTL %v, at most one lease given back per TTL)", n/2, n/2, time.Since(joined), fast.TTL)
	// Balanced, it stays so: nothing more is given back.
	time.Sleep(4 * fast.TTL) // the subject: nothing may move during this time
	assert.Equal(t, n/2, held(ea), "a's leases after the rebalance")
	assert.Equal(t, n/2, held(eb), "b's leases after the rebalance")

	stopB()
	wb.Wait()
	require.Eventually(t, func() bool { return held(ea) == n }, 10*time.Second, 10*time.Millisecond, "a takes b's leases back")
	stopA()
	wa.Wait()
	for i, a := range acts {
		assert.False(t, a.overlap.Load(), "two replicas acted at once under %s", names[i])
	}
	keys, err := kv.Keys(context.Background())
	if err != nil {
		require.ErrorIs(t, err, jetstream.ErrNoKeysFound)
	}
	for _, k := range keys {
		assert.False(t, lease.IsPresenceKey(k), "presence key %s left after both stopped", k)
	}
}

// A replica alone never gives a lease back, and Run's leases (not shared)
// never are.
func TestALoneReplicaKeepsItsSharedLeases(t *testing.T) {
	b := openBus(t)
	kv := leases(t, b)
	e, err := lease.NewElector(kv, "a", fast)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var lost sync.Map
	for _, name := range []string{"aggregator.zone-a", "aggregator.zone-b", "aggregator.zone-c"} {
		go e.RunShared(ctx, "aggregator", name, func(ctx context.Context) {
			<-ctx.Done()
			lost.Store(name, true)
		})
	}
	require.Eventually(t, func() bool { return len(e.HeldNames()) == 3 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(5 * fast.TTL) // the subject: nothing may be given back during this time
	assert.Len(t, e.HeldNames(), 3)
	lost.Range(func(k, _ any) bool { t.Errorf("lease %v given up by the only replica", k); return true })
}

// Three replicas sharing 4 leases end 2, 1 and 1: rounding the share up
// would leave the last one a standby at 2, 2 and 0.
func TestThreeReplicasShareFourLeases(t *testing.T) {
	b := openBus(t)
	kv := leases(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var es []*lease.Elector
	for i, who := range []string{"a", "b", "c"} {
		e, err := lease.NewElector(kv, who, fast)
		require.NoError(t, err)
		es = append(es, e)
		for _, name := range []string{"aggregator.zone-a", "aggregator.zone-b", "aggregator.zone-c", "aggregator.zone-d"} {
			go e.RunShared(ctx, "aggregator", name, func(ctx context.Context) { <-ctx.Done() })
		}
		if i == 0 {
			require.Eventually(t, func() bool { return len(e.HeldNames()) == 4 }, 10*time.Second, 10*time.Millisecond)
		}
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var got []int
		total := 0
		for _, e := range es {
			got = append(got, len(e.HeldNames()))
			total += len(e.HeldNames())
		}
		assert.Equal(c, 4, total, "leases held %v", got)
		assert.LessOrEqual(c, slices.Max(got)-slices.Min(got), 1, "leases held %v", got)
	}, 20*time.Second, 20*time.Millisecond)
}

// A lease that no other replica campaigns for is never given back, and
// one that another campaigns for is.
func TestOnlyLeasesAnotherCampaignsForAreGivenBack(t *testing.T) {
	b := openBus(t)
	kv := leases(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ea, err := lease.NewElector(kv, "a", fast)
	require.NoError(t, err)
	eb, err := lease.NewElector(kv, "b", fast)
	require.NoError(t, err)
	var mu sync.Mutex
	starts := map[string]int{}
	fn := func(name string) func(context.Context) {
		return func(ctx context.Context) {
			mu.Lock()
			starts[name]++
			mu.Unlock()
			<-ctx.Done()
		}
	}
	names := []string{"propagator.zone-a", "propagator.zone-b", "propagator.zone-c"}
	for _, name := range names {
		go ea.RunShared(ctx, "propagator", name, fn(name))
	}
	require.Eventually(t, func() bool { return len(ea.HeldNames()) == 3 }, 10*time.Second, 10*time.Millisecond)
	go eb.RunShared(ctx, "propagator", names[0], fn(names[0])) // b serves zone-a only
	require.Eventually(t, func() bool { return eb.Held(names[0]) }, 10*time.Second, 10*time.Millisecond, "zone-a given to b")
	time.Sleep(5 * fast.TTL) // the subject: nothing else may be given back during this time
	assert.True(t, ea.Held(names[1]) && ea.Held(names[2]), "a still holds zone-b and zone-c: %v", ea.HeldNames())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, starts[names[1]], "zone-b started more than once")
	assert.Equal(t, 1, starts[names[2]], "zone-c started more than once")
}

// After giving a lease back, a replica still takes it over when the
// replica that took it dies: the cooldown holds back only a free lease.
func TestGivenBackLeaseIsTakenOverWhenItsTakerDies(t *testing.T) {
	b := openBus(t)
	ea, err := lease.NewElector(leases(t, b), "a", fast)
	require.NoError(t, err)
	tb, err := b.Connect("taker")
	require.NoError(t, err)
	eb, err := lease.NewElector(leases(t, tb), "b", fast)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := []string{"remediation.zone-a", "remediation.zone-b"}
	for _, name := range names {
		go ea.RunShared(ctx, "remediation", name, func(ctx context.Context) { <-ctx.Done() })
	}
	require.Eventually(t, func() bool { return len(ea.HeldNames()) == 2 }, 10*time.Second, 10*time.Millisecond)
	for _, name := range names {
		go eb.RunShared(ctx, "remediation", name, func(ctx context.Context) { <-ctx.Done() })
	}
	require.Eventually(t, func() bool { return len(eb.HeldNames()) == 1 }, 10*time.Second, 5*time.Millisecond, "one lease given to b")
	taken := eb.HeldNames()[0]
	killed := time.Now()
	tb.NC.Close() // b dies at once: it neither renews nor releases
	require.Eventually(t, func() bool { return ea.Held(taken) }, 10*time.Second, 5*time.Millisecond)
	took := time.Since(killed)
	t.Logf("a took %s back %v after b died (TTL %v, cooldown %v)", taken, took, fast.TTL, 2*fast.TTL)
	assert.Less(t, took, fast.TTL+fast.StopAfter+2*fast.Poll, "the cooldown delayed the takeover of an expired lease")
}
