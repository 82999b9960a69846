package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

// TestWaitingReservesAreBegunTogether: reserves of one project that
// arrive together (a backlog sent as admission or the bus comes back) are
// begun in a few locked sections, not one each, and each is still decided
// against the usage the ones before it left: exactly what the limit fits
// is admitted, and the ledger counts what the keys hold.
func TestWaitingReservesAreBegunTogether(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	s := newReplica(t, b, "quota-1", nil)
	if err := s.SetLimit(ctx, "p", api.TierOnDemand, api.Limit{Pods: new(int64(40))}); err != nil {
		t.Fatal(err)
	}
	const n = 100
	before := s.batches.Load()
	var wg sync.WaitGroup
	var ok, refused atomic.Int64
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			err := s.Reserve(ctx, "p", fmt.Sprintf("p.app.w%d", i), demand(api.TierOnDemand, 1))
			var rej *api.QuotaRejection
			switch {
			case err == nil:
				ok.Add(1)
			case errors.As(err, &rej):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != 40 || refused.Load() != n-40 {
		t.Errorf("%d reserved, %d refused; want 40, %d", ok.Load(), refused.Load(), n-40)
	}
	keys, err := keyTotals(s, "p")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(keys, ledgerTotals(t, s, "p")); diff != "" {
		t.Errorf("ledger against the keys (-keys +ledger):\n%s", diff)
	}
	batches := s.batches.Load() - before
	t.Logf("%d reserves begun in %d locked sections", n, batches)
	if batches > n/4 {
		t.Errorf("%d reserves took %d locked sections, want at most %d: waiting reserves are not begun together", n, batches, n/4)
	}
	if r := s.recounts.Load(); r != 0 {
		t.Errorf("%d recounts: a batch outran the outcome ring", r)
	}
}
