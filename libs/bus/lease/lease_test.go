package lease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
)

var fast = lease.Options{TTL: 600 * time.Millisecond, RenewEvery: 100 * time.Millisecond, StopAfter: 300 * time.Millisecond, Poll: 100 * time.Millisecond, Stagger: 50 * time.Millisecond}

func openBus(t *testing.T) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: t.Name()})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

func leases(t *testing.T, b *bus.Bus) jetstream.KeyValue {
	t.Helper()
	kv, err := b.KV(context.Background(), bus.BucketLeases)
	require.NoError(t, err)
	return kv
}

// actors counts who acts under a lease and fails on any overlap.
type actors struct {
	mu      sync.Mutex
	active  map[string]bool
	overlap atomic.Bool
	starts  map[string]time.Time
	stops   map[string]time.Time
}

func newActors() *actors {
	return &actors{active: map[string]bool{}, starts: map[string]time.Time{}, stops: map[string]time.Time{}}
}

func (a *actors) fn(who string) func(ctx context.Context) {
	return func(ctx context.Context) {
		a.mu.Lock()
		if len(a.active) > 0 {
			a.overlap.Store(true)
		}
		a.active[who] = true
		a.starts[who] = time.Now()
		a.mu.Unlock()
		<-ctx.Done()
		a.mu.Lock()
		delete(a.active, who)
		a.stops[who] = time.Now()
		a.mu.Unlock()
	}
}

func (a *actors) startedAt(who string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.starts[who]
	return t, ok
}

func (a *actors) stoppedAt(who string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.stops[who]
	return t, ok
}

func TestTakeoverAfterHolderDies(t *testing.T) {
	b := openBus(t)
	// The holder has its own connection, closed abruptly to play a kill -9:
	// it cannot renew nor release.
	hb, err := b.Connect("holder")
	require.NoError(t, err)
	ea, err := lease.NewElector(leases(t, hb), "a", fast)
	require.NoError(t, err)
	eb, err := lease.NewElector(leases(t, b), "b", fast)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	act := newActors()
	var wg sync.WaitGroup
	wg.Go(func() { ea.Run(ctx, "scheduler", act.fn("a")) })
	require.Eventually(t, func() bool { return ea.Held("scheduler") }, 5*time.Second, 10*time.Millisecond)
	wg.Go(func() { eb.Run(ctx, "scheduler", act.fn("b")) })

	// b stays a standby while a renews.
	time.Sleep(2 * fast.TTL) // the subject: nothing may happen during this time
	assert.False(t, eb.Held("scheduler"), "standby took a lease that was being renewed")

	killed := time.Now()
	hb.NC.Close()
	require.Eventually(t, func() bool { return eb.Held("scheduler") }, 5*time.Second, 10*time.Millisecond)
	bStart, _ := act.startedAt("b")
	aStop, ok := act.stoppedAt("a")
	require.True(t, ok, "the dead holder's function was never cancelled")
	assert.False(t, act.overlap.Load(), "two holders acted at once")
	assert.True(t, aStop.Before(bStart), "old holder stopped at %v, after the new one started at %v", aStop, bStart)
	takeover := bStart.Sub(killed)
	t.Logf("takeover after kill: %v (TTL %v, poll %v); old holder stopped acting %v after the kill", takeover, fast.TTL, fast.Poll, aStop.Sub(killed))
	assert.Less(t, takeover, fast.TTL+fast.Poll+fast.StopAfter)
	cancel()
	wg.Wait()
}

func TestCleanStopHandsOverAtOnce(t *testing.T) {
	b := openBus(t)
	kv := leases(t, b)
	ea, _ := lease.NewElector(kv, "a", fast)
	eb, _ := lease.NewElector(kv, "b", fast)
	actx, stopA := context.WithCancel(context.Background())
	bctx, stopB := context.WithCancel(context.Background())
	defer stopB()
	act := newActors()
	done := make(chan struct{})
	go func() { defer close(done); ea.Run(actx, "propagator.zone-a", act.fn("a")) }()
	require.Eventually(t, func() bool { return ea.Held("propagator.zone-a") }, 5*time.Second, 10*time.Millisecond)
	go eb.Run(bctx, "propagator.zone-a", act.fn("b"))
	stopA()
	<-done
	stopped := time.Now()
	require.Eventually(t, func() bool { return eb.Held("propagator.zone-a") }, 5*time.Second, 5*time.Millisecond)
	took := time.Since(stopped)
	t.Logf("handover after a clean stop: %v", took)
	assert.Less(t, took, fast.TTL, "a released lease waited for expiry")
	assert.False(t, act.overlap.Load())
}

// TestCandidateWaitsWholeTTL drives the candidate's clock by hand: a lease
// whose holder vanished is taken only once its revision has stayed
// unchanged for a whole TTL of the candidate's own clock.
func TestCandidateWaitsWholeTTL(t *testing.T) {
	b := openBus(t)
	kv := leases(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := kv.Create(ctx, "scheduler", []byte(`{"holder":"dead"}`))
	require.NoError(t, err)

	clk := clocktesting.NewFakeClock(time.Now())
	o := fast
	o.Clock = clk
	e, err := lease.NewElector(kv, "c", o)
	require.NoError(t, err)
	go e.Run(ctx, "scheduler", func(ctx context.Context) { <-ctx.Done() })

	// Each step lets one poll run; the first one only observes the revision.
	step := func() {
		require.Eventually(t, clk.HasWaiters, 5*time.Second, time.Millisecond)
		clk.Step(o.Poll)
	}
	for elapsed := time.Duration(0); elapsed < o.TTL; elapsed += o.Poll {
		step()
		assert.False(t, e.Held("scheduler"), "taken after %v < TTL", elapsed)
	}
	step() // a whole TTL since the first observation
	require.Eventually(t, func() bool { return e.Held("scheduler") }, 5*time.Second, time.Millisecond)
	rec, _, err := lease.Current(ctx, kv, "scheduler")
	require.NoError(t, err)
	assert.Equal(t, "c", rec.Holder)
}

func TestHolderStopsWhenItCannotRenew(t *testing.T) {
	b := openBus(t)
	hb, err := b.Connect("holder")
	require.NoError(t, err)
	e, _ := lease.NewElector(leases(t, hb), "a", fast)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	act := newActors()
	go e.Run(ctx, "aggregator.zone-b", act.fn("a"))
	require.Eventually(t, func() bool { return e.Held("aggregator.zone-b") }, 5*time.Second, 10*time.Millisecond)
	cut := time.Now()
	hb.NC.Close()
	require.Eventually(t, func() bool { _, ok := act.stoppedAt("a"); return ok }, 5*time.Second, 5*time.Millisecond)
	stopped, _ := act.stoppedAt("a")
	t.Logf("holder stopped acting %v after losing the bus (StopAfter %v, TTL %v)", stopped.Sub(cut), fast.StopAfter, fast.TTL)
	assert.Less(t, stopped.Sub(cut), fast.TTL, "holder still acting when a standby could take over")
	assert.False(t, e.Held("aggregator.zone-b"))
}

func TestOptionsRejectUnsafeTimings(t *testing.T) {
	for _, o := range []lease.Options{
		{TTL: time.Second, StopAfter: time.Second},
		{TTL: time.Second, StopAfter: 500 * time.Millisecond, RenewEvery: 600 * time.Millisecond},
	} {
		_, err := lease.NewElector(nil, "x", o)
		assert.Error(t, err, "%+v", o)
	}
}

// TestRestartedReplicaTakesBackItsLease: a lease left by a killed run of
// the same replica (same Instance) is taken back at once, without the
// TTL's wait that any other replica's lease gets. The candidate's clock
// never moves, so only the take-back can win the lease.
func TestRestartedReplicaTakesBackItsLease(t *testing.T) {
	for _, tc := range []struct {
		name, instance string
		want           bool
	}{
		{"same replica restarted", "scheduler-0", true},
		{"another replica", "scheduler-1", false},
		{"no instance", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := openBus(t)
			kv := leases(t, b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err := kv.Create(ctx, "scheduler", []byte(`{"holder":"scheduler-0-dead","instance":"scheduler-0"}`))
			require.NoError(t, err)
			o := fast
			o.Clock = clocktesting.NewFakeClock(time.Now())
			o.Instance = tc.instance
			e, err := lease.NewElector(kv, tc.instance+"-new", o)
			require.NoError(t, err)
			go e.Run(ctx, "scheduler", func(ctx context.Context) { <-ctx.Done() })
			if !tc.want {
				require.Eventually(t, o.Clock.(*clocktesting.FakeClock).HasWaiters, 5*time.Second, time.Millisecond)
				assert.False(t, e.Held("scheduler"), "another replica's lease taken before its TTL")
				return
			}
			require.Eventually(t, func() bool { return e.Held("scheduler") }, 5*time.Second, time.Millisecond)
			rec, _, err := lease.Current(ctx, kv, "scheduler")
			require.NoError(t, err)
			assert.Equal(t, lease.Record{Holder: "scheduler-0-new", Instance: "scheduler-0"}, lease.Record{Holder: rec.Holder, Instance: rec.Instance})
		})
	}
}

func TestHolderIDOnInstance(t *testing.T) {
	for _, tc := range []struct {
		name, env, prefix, wantInstance string
	}{
		{"instance named after the service", "scheduler-0", "scheduler", "scheduler-0"},
		{"pod name without the prefix", "pod-7", "quota", "quota-pod-7"},
		{"no instance", "", "scheduler", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(lease.InstanceEnv, tc.env)
			a, b := lease.NewHolderID(tc.prefix), lease.NewHolderID(tc.prefix)
			assert.NotEqual(t, a, b, "two runs share a holder id")
			assert.Equal(t, tc.wantInstance, lease.InstanceOf(a))
			assert.Equal(t, lease.InstanceOf(a), lease.InstanceOf(b))
		})
	}
}

// TestStandbyTakesOverWithoutWaitingForItsPoll: a standby watches the
// lease, so it takes a released lease as the deletion arrives and a dead
// holder's lease as soon as the last renewal has stood a TTL, not at its
// next poll after that. The poll here is long enough that waiting for it
// would miss the bound.
func TestStandbyTakesOverWithoutWaitingForItsPoll(t *testing.T) {
	slow := fast
	slow.Poll = 2 * time.Second
	for _, tc := range []struct {
		name  string
		kill  bool // the holder dies (its connection cut) rather than stopping cleanly
		bound time.Duration
	}{
		{"released", false, 300 * time.Millisecond},
		{"holder killed", true, slow.TTL + 300*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := openBus(t)
			hb, err := b.Connect("holder")
			require.NoError(t, err)
			ea, err := lease.NewElector(leases(t, hb), "a", slow)
			require.NoError(t, err)
			eb, err := lease.NewElector(leases(t, b), "b", slow)
			require.NoError(t, err)
			actx, stopA := context.WithCancel(context.Background())
			defer stopA()
			bctx, stopB := context.WithCancel(context.Background())
			defer stopB()
			act := newActors()
			done := make(chan struct{})
			go func() { defer close(done); ea.Run(actx, "scheduler", act.fn("a")) }()
			require.Eventually(t, func() bool { return ea.Held("scheduler") }, 5*time.Second, 10*time.Millisecond)
			go eb.Run(bctx, "scheduler", act.fn("b"))
			time.Sleep(slow.Poll + 200*time.Millisecond) // b has polled once and waits on its next poll
			at := time.Now()
			if tc.kill {
				hb.NC.Close()
			} else {
				stopA()
				<-done
			}
			require.Eventually(t, func() bool { return eb.Held("scheduler") }, 10*time.Second, 5*time.Millisecond)
			took := time.Since(at)
			t.Logf("standby took the lease %v after the holder ended (TTL %v, poll %v)", took, slow.TTL, slow.Poll)
			assert.Less(t, took, tc.bound)
			assert.False(t, act.overlap.Load(), "two holders acted at once")
		})
	}
}

// TestOwnLeaseTakenBackAfterALostRenewal: a holder that stopped acting
// because its renewals timed out, one of which the bus applied all the
// same (so the revision is newer than the last it knows it wrote), takes
// its lease back at once rather than waiting a TTL for itself. The clock
// never moves, so only the take-back can win it.
func TestOwnLeaseTakenBackAfterALostRenewal(t *testing.T) {
	b := openBus(t)
	kv := leases(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The record as the timed-out renewal left it: this holder's, at a
	// revision the elector has not seen.
	_, err := kv.Create(ctx, "scheduler", []byte(`{"holder":"a"}`))
	require.NoError(t, err)
	_, err = kv.Put(ctx, "scheduler", []byte(`{"holder":"a"}`))
	require.NoError(t, err)
	o := fast
	o.Clock = clocktesting.NewFakeClock(time.Now())
	e, err := lease.NewElector(kv, "a", o)
	require.NoError(t, err)
	go e.Run(ctx, "scheduler", func(ctx context.Context) { <-ctx.Done() })
	require.Eventually(t, func() bool { return e.Held("scheduler") }, 5*time.Second, time.Millisecond)
}
