package quota

import (
	"context"
	"log/slog"
	"testing"
	"time"

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
	s := New(b, slog.New(slog.DiscardHandler))
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
