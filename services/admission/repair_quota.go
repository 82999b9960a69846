package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// The repair loop also checks that a recently written workload is held by
// the quota ledger. Two races leave a workload written without its
// reservation, both when a write of the workloads bucket lands long after
// it was made (a stream without quorum during a NATS server's restart
// takes the write and commits it tens of seconds later):
//
//   - the write's caller gave up (its context ended) and admission gave
//     the quota back (reservation.restore found no workload yet), or
//   - the quota service's orphan check, OrphanAge after the reservation,
//     found no workload yet and released it.
//
// A client that then retries finds the workload written, with the same
// spec, and reserves nothing, so the project's usage stays short of its
// workloads for good. The compose fault test measured it: 998 pods
// counted for 1,000 Apps after a NATS server was killed.
//
// So each write the repair loop sees land is checked once, QuotaRecheck
// after it landed: past the quota service's OrphanAge (30 s) and the time
// its release takes, so both races have played out. The recent writes a
// replica replays when it takes the lease are checked between one and two
// QuotaRecheck later, each at a moment of its own. The checks run on a
// queue of their own with one worker, and never in the seconds after an
// outage, when the creates held back by it arrive (checking at once there
// slowed them past the outage tests' 2 s). The loop's periodic looks at
// every workload check nothing.

// QuotaRecheck is how long after a write landed its reservation is
// checked.
const QuotaRecheck = 45 * time.Second

// quotaChecks notes the keys whose reservation is to be checked, and from
// when. A key written again is due anew.
type quotaChecks struct {
	mu  sync.Mutex
	due map[string]time.Time
}

// mark makes key's check due at at.
func (c *quotaChecks) mark(key string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.due[key] = at
}

// take says whether key's check is due at now, and forgets it if so; a
// check not due yet stays (its own look comes later).
func (c *quotaChecks) take(key string, now time.Time) (at time.Time, due bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.due[key]
	if !ok || now.Before(at) {
		return time.Time{}, false
	}
	delete(c.due, key)
	return at, true
}

// putBack notes key's check, due at at, again, unless a newer write marked
// it.
func (c *quotaChecks) putBack(key string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.due[key]; !ok {
		c.due[key] = at
	}
}

// quotaCheckKey runs the quota check key is due, if any (on the checks'
// own queue).
func (s *Service) quotaCheckKey(ctx context.Context, m *bus.TypedMirror[repairDoc], quota jetstream.KeyValue, checks *quotaChecks, key string) error {
	at, due := checks.take(key, time.Now())
	if !due {
		return nil
	}
	e, ok := m.Get(key)
	if !ok {
		return nil // deleted: released with it
	}
	w, err := workloadOf(e)
	if err != nil {
		return nil // undecodable: its repair logs it
	}
	if err := s.repairQuota(ctx, quota, w, e.Revision); err != nil {
		checks.putBack(key, at) // the key is retried
		return err
	}
	return nil
}

// repairQuota checks that the quota holds what w, written at rev,
// demands; ErrNoChange-like outcomes are nil.
func (s *Service) repairQuota(ctx context.Context, quota jetstream.KeyValue, w *api.Workload, rev uint64) error {
	want := demand(w)
	e, err := quota.Get(ctx, api.QuotaReservationKey(w.Metadata.Project, w.Key()))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return fmt.Errorf("quota check %s: %w", w.Key(), err)
	default:
		var r api.Reservation
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return fmt.Errorf("quota check %s: decode reservation: %w", w.Key(), err)
		}
		if r.State != api.ReservationCommitted || r.Demand == want {
			// Held, or a transaction under way (its owner or the quota
			// service's repair finishes it; the second check sees the end).
			return nil
		}
	}
	// Read the workload back: the mirror's copy may be of a workload
	// deleted (and released) since.
	cur, curRev, err := s.get(ctx, w.Key())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("quota check %s: %w", w.Key(), err)
	}
	if curRev != rev {
		return nil // written again since: that write is checked on its own
	}
	s.log.Warn("repair: the quota did not hold a written workload; reserving it again",
		"key", w.Key(), "generation", cur.Metadata.Generation)
	if err := s.reserve(ctx, cur); err != nil {
		return fmt.Errorf("quota check %s: reserve: %w", w.Key(), err)
	}
	return nil
}
