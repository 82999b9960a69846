package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// ErrAborted says a reservation's transaction was refused without a limit
// being broken (its outcome was lost and the project recounted, or the
// key stayed busy with other transactions); asking again may succeed.
var ErrAborted = errors.New("reservation aborted")

var (
	// errBusy: the reservation key holds another transaction's intent.
	errBusy = errors.New("reservation busy")
	// errUnknown: the ledger no longer holds every outcome recorded since
	// the intent was written.
	errUnknown = errors.New("transaction outcome unknown")
)

// maxTurns bounds how many other transactions on the same key an
// operation finishes before it gives up with ErrAborted.
const maxTurns = 8

// Reserve holds d for the workload key, replacing what it held before (so
// a retry, or an update, is counted exactly once; a tier change moves the
// holding). It returns a *api.QuotaRejection when a limit of d's tier
// would be exceeded.
func (s *Service) Reserve(ctx context.Context, project, key string, d api.Demand) error {
	return s.transact(ctx, "reserve", project, key, func(l *api.Ledger, cur *api.Reservation) (api.Reservation, error) {
		intent := api.Reservation{Project: project, Key: key, State: api.ReservationPending, Demand: d,
			Txn: newTxn(), At: time.Now().UTC()}
		if cur != nil {
			// The same demand again changes nothing, unless the
			// reservation is old enough for the orphan sweep to be
			// checking it: its workload may be missing because this is
			// the retry that writes it (its first admission died), so a
			// new transaction makes the sweep's release, which holds
			// only for the transaction it found, a no-op.
			if cur.Demand == d && time.Since(cur.At) < s.orphanAge/2 {
				return intent, bus.ErrNoChange
			}
			intent.Prev = &cur.Demand
		}
		if rej := s.check(l, intent); rej != nil {
			return intent, rej
		}
		return intent, nil
	})
}

// Release returns what key held; releasing what is not held is a no-op.
func (s *Service) Release(ctx context.Context, project, key string) error {
	return s.release(ctx, project, key, "")
}

// release is Release; with onlyTxn set, only a reservation last changed
// by that transaction is released.
func (s *Service) release(ctx context.Context, project, key, onlyTxn string) error {
	return s.transact(ctx, "release", project, key, func(_ *api.Ledger, cur *api.Reservation) (api.Reservation, error) {
		if cur == nil || (onlyTxn != "" && cur.Txn != onlyTxn) {
			return api.Reservation{}, bus.ErrNoChange
		}
		intent := *cur
		intent.State, intent.Prev, intent.Txn = api.ReservationReleasing, nil, newTxn()
		return intent, nil
	})
}

// intentFunc returns the intent of a transaction on a key, given the
// project's ledger and what the key holds (nil: nothing). It returns
// bus.ErrNoChange, or a *api.QuotaRejection, to write nothing. It may run
// several times.
type intentFunc func(l *api.Ledger, cur *api.Reservation) (api.Reservation, error)

// transact runs one transaction (verb names it in errors) on a workload
// key: intent, decision and finish (see the package comment).
func (s *Service) transact(ctx context.Context, verb, project, key string, build intentFunc) error {
	rk := api.QuotaReservationKey(project, key)
	for turn := 0; turn < maxTurns; turn++ {
		intent, rev, applied, rej, err := s.begin(ctx, project, rk, build)
		var refused *api.QuotaRejection
		switch {
		case errors.Is(err, bus.ErrNoChange):
			return nil
		case errors.As(err, &refused):
			return refused
		case errors.Is(err, errBusy):
			if err := s.finishKey(ctx, rk); err != nil {
				return err
			}
			continue
		case err != nil:
			return fmt.Errorf("%s %s: %w", verb, key, err)
		}
		if err := s.step("decided"); err != nil {
			return err
		}
		lost, err := s.finish(ctx, intent, rev, applied)
		if err != nil {
			return err
		}
		switch {
		case applied && lost:
			// Another replica finished the intent while this one waited
			// (its decision fell out of the outcome ring, so a recount
			// may have refused it): the key, not this decision, says.
			return s.confirm(ctx, verb, rk, intent)
		case applied:
			return nil
		case rej != nil:
			return rej
		default:
			return fmt.Errorf("%s %s: %w", verb, key, ErrAborted)
		}
	}
	return fmt.Errorf("%s %s: key busy: %w", verb, key, ErrAborted)
}

func (s *Service) step(name string) error {
	if s.fail == nil {
		return nil
	}
	return s.fail(name)
}

// finishKey decides and finishes whatever intent the reservation key
// holds (its owner's work, done by whoever comes next). A decision may
// change the key itself (a recount aborts the intent), so the key is read
// again until a finish holds.
func (s *Service) finishKey(ctx context.Context, rk string) error {
	for turn := 0; turn < maxTurns; turn++ {
		e, err := s.kv.Get(ctx, rk)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read reservation %s: %w", rk, err)
		}
		r, err := decodeReservation(e.Value())
		if err != nil {
			return err
		}
		if r.State == api.ReservationCommitted {
			return nil
		}
		lctx, unlock, err := s.lock(ctx, r.Project)
		if err != nil {
			return err
		}
		applied, _, err := s.decide(lctx, r)
		unlock()
		if err != nil {
			return err
		}
		lost, err := s.finish(ctx, r, e.Revision(), applied)
		if err != nil || !lost {
			return err
		}
	}
	return fmt.Errorf("finish %s: key busy: %w", rk, ErrAborted)
}

// confirm says whether applied intent r, finished by another replica,
// ended as applied: a reserve's key holds it committed with its demand (a
// refused resize is committed with the demand it replaced), a release's
// key is gone. Otherwise the outcome was overruled (a recount refused it)
// or cannot be told, and the request fails with ErrAborted, to be asked
// again.
func (s *Service) confirm(ctx context.Context, verb, rk string, r api.Reservation) error {
	e, err := s.kv.Get(ctx, rk)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		if r.State == api.ReservationReleasing {
			return nil
		}
	case err != nil:
		return fmt.Errorf("%s %s: confirm: %w", verb, r.Key, err)
	default:
		cur, err := decodeReservation(e.Value())
		if err != nil {
			return err
		}
		if r.State == api.ReservationPending && cur.State == api.ReservationCommitted && cur.Txn == r.Txn && cur.Demand == r.Demand {
			return nil
		}
	}
	s.log.Warn("transaction finished by another replica with another outcome; asking again", "project", r.Project, "key", r.Key, "txn", r.Txn)
	return fmt.Errorf("%s %s: outcome overruled: %w", verb, r.Key, ErrAborted)
}

// decide makes (or reads) the decision on intent r in its project's
// ledger: whether its delta is applied. A refused reserve comes with the
// limit it breaks, when one does. The project's lock must be held.
func (s *Service) decide(ctx context.Context, r api.Reservation) (applied bool, rej *api.QuotaRejection, err error) {
	for round := 0; round < 2; round++ {
		err = s.writeLedger(ctx, r.Project, func(l *api.Ledger) error {
			if o, ok := outcome(l, r.Txn); ok {
				applied, rej = o == api.TxnApplied, nil
				if !applied {
					rej = s.check(l, r)
				}
				return bus.ErrNoChange
			}
			if !covers(l, r.Seq) || r.Aborted {
				return errUnknown
			}
			rej = s.check(l, r)
			applied = rej == nil
			if applied {
				apply(l, r)
			}
			record(l, r.Txn, applied)
			return nil
		})
		if errors.Is(err, errUnknown) {
			s.log.Warn("transaction outcome no longer in the ledger, recounting the project", "project", r.Project, "key", r.Key, "txn", r.Txn)
			if err := s.recount(ctx, r.Project); err != nil {
				return false, nil, err
			}
			continue
		}
		if err != nil && !errors.Is(err, bus.ErrNoChange) {
			return false, nil, fmt.Errorf("decide %s: %w", r.Key, err)
		}
		return applied, rej, nil
	}
	return false, nil, fmt.Errorf("decide %s: %w", r.Key, errUnknown)
}

// finish turns decided intent r, written at rev, into its end state. A
// lost race (lost true) means another replica finished it: once an intent
// is decided, only its finish may change the key, but that replica may
// have had to recount and refuse it (see confirm).
func (s *Service) finish(ctx context.Context, r api.Reservation, rev uint64, applied bool) (lost bool, err error) {
	rk := api.QuotaReservationKey(r.Project, r.Key)
	var end *api.Reservation
	switch {
	case r.State == api.ReservationPending && applied:
		c := r
		c.State, c.Prev = api.ReservationCommitted, nil
		end = &c
	case r.State == api.ReservationPending && r.Prev != nil:
		c := r
		c.State, c.Demand, c.Prev = api.ReservationCommitted, *r.Prev, nil
		end = &c
	}
	if end != nil {
		b, merr := json.Marshal(end)
		if merr != nil {
			return false, merr
		}
		_, err = bus.CompareAndSet(ctx, s.kv, rk, b, rev)
	} else {
		_, err = bus.CompareAndDelete(ctx, s.bus.JS, s.kv, rk, rev)
	}
	switch {
	case errors.Is(err, bus.ErrConflict):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("finish %s: %w", r.Key, err)
	}
	return false, nil
}

// recount sets a project's usage from its reservation keys, refusing
// every pending intent whose outcome is no longer known and recording
// every release whose outcome is no longer known as applied. It reads
// every reservation of the project, so it runs only when an intent
// outlived the outcome ring. The project's lock must be held.
//
// It is exact because what a reservation key counts for given the ledger
// it is read against (committed: its demand; an intent: per its recorded
// outcome, or what it replaces while undecided) changes only with a
// write of the ledger, which makes the compare-and-set fail and recount
// again, or with a write of the key, which an intent it refuses cannot
// have behind its back: the intent is first marked aborted on its key
// (compare-and-set on the revision read), so an owner that decided it
// applied long ago and stalled can no longer commit it (its finish loses
// and confirm reports ErrAborted); a key that changed meanwhile is read
// again.
func (s *Service) recount(ctx context.Context, project string) error {
	s.recounts.Add(1)
	var err error
	for attempt := 0; attempt < maxTurns; attempt++ {
		err = s.writeLedger(ctx, project, func(l *api.Ledger) error {
			rs, err := s.reservations(ctx, project)
			if err != nil {
				return err
			}
			old := l.Clone()
			l.Usage, l.Reservations = map[api.Tier]api.Demand{}, 0
			count := func(d *api.Demand) {
				if d != nil {
					l.Usage[d.Tier] = add(l.Used(d.Tier), *d)
					l.Reservations++
				}
			}
			for _, e := range rs {
				r := e.Reservation
				o, known := outcome(old, r.Txn)
				undecided := !known && covers(old, r.Seq) && !r.Aborted
				switch r.State {
				case api.ReservationCommitted:
					count(&r.Demand)
				case api.ReservationPending:
					switch {
					case known && o == api.TxnApplied:
						count(&r.Demand)
					case known || undecided:
						count(r.Prev)
					default:
						if !r.Aborted {
							if err := s.abort(ctx, r, e.rev); err != nil {
								return err
							}
						}
						record(l, r.Txn, false)
						count(r.Prev)
					}
				case api.ReservationReleasing:
					switch {
					case undecided:
						count(&r.Demand)
					case !known:
						record(l, r.Txn, true)
					}
				}
			}
			return nil
		})
		if !errors.Is(err, bus.ErrConflict) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("recount %s: %w", project, err)
	}
	return nil
}

// abort marks pending intent r, read at rev, aborted on its key. It
// returns bus.ErrConflict when the key changed since (the recount reads
// the keys again).
func (s *Service) abort(ctx context.Context, r api.Reservation, rev uint64) error {
	r.Aborted = true
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := bus.CompareAndSet(ctx, s.kv, api.QuotaReservationKey(r.Project, r.Key), b, rev); err != nil {
		return fmt.Errorf("abort %s: %w", r.Key, err)
	}
	s.log.Warn("intent refused by a recount (its outcome had left the ledger)", "project", r.Project, "key", r.Key, "txn", r.Txn)
	return nil
}

// held is a reservation key's value and its revision.
type held struct {
	api.Reservation
	rev uint64
}

// reservations reads every reservation key of a project.
func (s *Service) reservations(ctx context.Context, project string) ([]held, error) {
	w, err := s.kv.Watch(ctx, api.QuotaReservationFilter(project), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list reservations %s: %w", project, err)
	}
	defer func() { _ = w.Stop() }()
	var out []held
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("list reservations %s: watch ended", project)
			}
			if e == nil {
				return out, nil
			}
			r, err := decodeReservation(e.Value())
			if err != nil {
				return nil, err
			}
			out = append(out, held{Reservation: r, rev: e.Revision()})
		}
	}
}

// check returns the cap that applying intent r to l would break, with
// what r replaces in the same tier not counted as used (nor checked
// again: see api.Ledger.Check), or, for a new workload, the workload cap.
func (s *Service) check(l *api.Ledger, r api.Reservation) *api.QuotaRejection {
	if r.State != api.ReservationPending {
		return nil
	}
	if r.Prev == nil && l.Reservations >= s.defaults.MaxWorkloads {
		return &api.QuotaRejection{Project: l.Project, Tier: r.Demand.Tier, Resource: api.ResourceWorkloads,
			Limit: s.defaults.MaxWorkloads, Used: l.Reservations, Requested: 1}
	}
	used := l.Used(r.Demand.Tier)
	prev := api.Demand{Tier: r.Demand.Tier}
	if r.Prev != nil && r.Prev.Tier == r.Demand.Tier {
		used = sub(used, *r.Prev)
		prev = *r.Prev
	}
	return l.Check(r.Demand, used, prev, s.defaults)
}

// apply adds intent r's delta to l.
func apply(l *api.Ledger, r api.Reservation) {
	switch r.State {
	case api.ReservationPending:
		if r.Prev != nil {
			l.Usage[r.Prev.Tier] = sub(l.Used(r.Prev.Tier), *r.Prev)
		} else {
			l.Reservations++
		}
		l.Usage[r.Demand.Tier] = add(l.Used(r.Demand.Tier), r.Demand)
	case api.ReservationReleasing:
		l.Usage[r.Demand.Tier] = sub(l.Used(r.Demand.Tier), r.Demand)
		l.Reservations--
	}
}

// record appends a transaction's outcome to l, keeping the last TxnRing.
func record(l *api.Ledger, txn string, applied bool) {
	o := byte(api.TxnRefused)
	if applied {
		o = api.TxnApplied
	}
	l.Seq++
	l.Txns = append(l.Txns, txn+string(o))
	if n := len(l.Txns); n > TxnRing {
		l.Txns = append([]string(nil), l.Txns[n-TxnRing:]...)
	}
}

// outcome finds txn's recorded outcome in l.
func outcome(l *api.Ledger, txn string) (byte, bool) {
	for i := len(l.Txns) - 1; i >= 0; i-- {
		t := l.Txns[i]
		if len(t) == len(txn)+1 && t[:len(txn)] == txn {
			return t[len(txn)], true
		}
	}
	return 0, false
}

// covers says whether l still holds every outcome recorded after its
// transaction count was seq, so that a transaction begun then and missing
// from l is undecided.
func covers(l *api.Ledger, seq uint64) bool {
	return l.Seq-uint64(len(l.Txns)) <= seq
}

func add(a, b api.Demand) api.Demand {
	a.MilliCPU += b.MilliCPU
	a.MemoryBytes += b.MemoryBytes
	a.GPUs += b.GPUs
	a.Pods += b.Pods
	a.StorageBytes += b.StorageBytes
	return a
}

func sub(a, b api.Demand) api.Demand {
	a.MilliCPU -= b.MilliCPU
	a.MemoryBytes -= b.MemoryBytes
	a.GPUs -= b.GPUs
	a.Pods -= b.Pods
	a.StorageBytes -= b.StorageBytes
	return a
}

func newTxn() string { return strconv.FormatUint(rand.Uint64(), 36) }

func decodeReservation(b []byte) (api.Reservation, error) {
	var r api.Reservation
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decode reservation: %w", err)
	}
	return r, nil
}
