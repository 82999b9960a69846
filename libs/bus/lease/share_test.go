package lease_test

import (
	"context"
	"fmt"
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
			wg.Add(1)
			go func() { defer wg.Done(); e.RunShared(ctx, group, name, acts[i].fn(e.Holder())) }()
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
