package quota

import (
	"context"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// TestNewReservationsAreCheckedOnceForTheirWorkload: a reservation whose
// workload never appears is returned OrphanAge after it was committed,
// without a sweep of every reservation; one whose workload exists is
// checked once and then left alone.
func TestNewReservationsAreCheckedOnceForTheirWorkload(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	s := New(b, slog.New(slog.DiscardHandler), Ample())
	s.orphanAge = 300 * time.Millisecond
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop() })
	<-s.mirror.Ready()

	wkv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	_, err = wkv.Put(ctx, "p.app.kept", []byte("{}"))
	require.NoError(t, err)
	for _, k := range []string{"p.app.kept", "p.app.orphan"} {
		require.NoError(t, s.Reserve(ctx, "p", k, api.Demand{Tier: api.TierOnDemand, Pods: 1}))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, s.CheckOrphans(ctx))
		l, err := s.Ledger(ctx, "p")
		require.NoError(c, err)
		assert.Equal(c, int64(1), l.Used(api.TierOnDemand).Pods)
	}, 5*time.Second, 50*time.Millisecond)
	qkv, _ := b.KV(ctx, bus.BucketQuota)
	_, err = qkv.Get(ctx, api.QuotaReservationKey("p", "p.app.kept"))
	assert.NoError(t, err, "the live workload's reservation was released")
	s.mu.Lock()
	left := len(s.orphans)
	s.mu.Unlock()
	assert.Zero(t, left, "reservations still waiting for a check after theirs ran")
}

// TestFullSweepSpreadsItsChecks: the full sweep notes each reservation
// older than the orphan age for one check at a random moment of its pass,
// rather than reading every workload key at once; a reservation noted
// already keeps its earlier check, and a young one is not noted.
func TestFullSweepSpreadsItsChecks(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	s := New(b, slog.New(slog.DiscardHandler), Ample())
	s.orphanAge = time.Hour // the service's own checks stay out of the way
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop() })
	keys := []string{"p.app.a", "p.app.b", "p.app.c", "p.app.d"}
	for _, k := range keys {
		require.NoError(t, s.Reserve(ctx, "p", k, api.Demand{Tier: api.TierOnDemand, Pods: 1}))
	}
	// Committed in the mirror, not only there: a reservation the mirror
	// still holds as an intent is not swept (seen once with the machine
	// busy: 3 of the 4 noted).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, k := range keys {
			e, ok := s.mirror.Get(api.QuotaReservationKey("p", k))
			if !assert.True(c, ok, k) {
				continue
			}
			r, err := decodeReservation(e.Value)
			if assert.NoError(c, err, k) {
				assert.Equal(c, api.ReservationCommitted, r.State, k)
			}
		}
	}, 5*time.Second, 10*time.Millisecond)
	noted := func() map[string]time.Time {
		s.mu.Lock()
		defer s.mu.Unlock()
		return maps.Clone(s.orphans)
	}
	s.mu.Lock()
	clear(s.orphans)
	s.mu.Unlock()

	now := time.Now()
	// Young reservations: nothing to check.
	s.scheduleSweep(now, time.Hour, 10*time.Minute)
	assert.Empty(t, noted())

	// Two hours on, each is due once within the pass.
	later, pass := now.Add(2*time.Hour), 10*time.Minute
	n := s.scheduleSweep(later, time.Hour, pass)
	assert.GreaterOrEqual(t, n, len(keys))
	got := noted()
	require.Len(t, got, len(keys))
	distinct := map[time.Time]bool{}
	for k, at := range got {
		assert.False(t, at.Before(later), "%s due before the pass", k)
		assert.True(t, at.Before(later.Add(pass)), "%s due after the pass", k)
		distinct[at] = true
	}
	assert.Greater(t, len(distinct), 1, "every check at the same moment: a burst")

	// Another pass keeps the earlier notes.
	s.scheduleSweep(later, time.Hour, 0)
	for k, at := range noted() {
		assert.Equal(t, later, at, k)
	}
	s.scheduleSweep(later, time.Hour, pass)
	for k, at := range noted() {
		assert.Equal(t, later, at, "%s: a later pass moved an earlier check", k)
	}
}

// TestRetryOfAnOldReservationOutlivesTheOrphanCheck: a reservation whose
// workload is not written yet (admission died after reserving) is reserved
// again by the retry that writes it; once old enough for the orphan sweep,
// that retry makes a new transaction, so a release the sweep decided on
// the old one changes nothing.
func TestRetryOfAnOldReservationOutlivesTheOrphanCheck(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	s := newReplica(t, b, "quota-1", nil, func(s *Service) { s.orphanAge = 200 * time.Millisecond })
	d := demand(api.TierOnDemand, 2)
	require.NoError(t, s.Reserve(ctx, "p", "p.app.web", d))
	rk := api.QuotaReservationKey("p", "p.app.web")
	read := func() api.Reservation {
		e, err := s.kv.Get(ctx, rk)
		require.NoError(t, err)
		r, err := decodeReservation(e.Value())
		require.NoError(t, err)
		return r
	}
	first := read()
	require.NoError(t, s.Reserve(ctx, "p", "p.app.web", d))
	require.Equal(t, first.Txn, read().Txn, "a retry right away writes nothing")
	time.Sleep(s.orphanAge)
	require.NoError(t, s.Reserve(ctx, "p", "p.app.web", d))
	again := read()
	require.NotEqual(t, first.Txn, again.Txn, "a retry of an old reservation is a new transaction")
	require.NoError(t, s.release(ctx, "p", "p.app.web", first.Txn))
	assert.Equal(t, again.Txn, read().Txn, "the sweep's release of the old transaction changed the key")
	want := totals{OnDemand: d, Reserved: demand(api.TierReserved, 0), Count: 1}
	keys, err := keyTotals(s, "p")
	require.NoError(t, err)
	assert.Empty(t, cmp.Diff(want, keys), "reservation keys")
	assert.Empty(t, cmp.Diff(want, ledgerTotals(t, s, "p")), "ledger")
}
