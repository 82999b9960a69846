package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Group commit. The transactions of one project that wait for its lock
// together are begun together by whichever of them takes the lock (the
// leader): one read of the ledger, their intents written at once (each on
// its own key), and one ledger write that decides them in the order they
// arrived, each checked against the usage the ones before it left. A
// project's reserves then cost a locked section per batch, not per
// reserve, which is what lets a backlog (the requests held while
// admission or the bus was away, all sent as it returns) drain in a few
// round trips instead of one locked section after the other.
//
// Correctness is unchanged: each intent still carries the ledger's Seq
// read before it was written, and its decision is still one
// compare-and-set of the ledger. A batch holds at most maxBatch
// transactions, so the decisions made between an intent's Seq and its own
// decision stay well within TxnRing.

// maxBatch bounds the transactions begun in one locked section.
const maxBatch = 64

// batchTimeout bounds a batch's reads and writes: the leader's caller may
// give up while the others' still wait.
const batchTimeout = 5 * time.Second

// job is one transaction waiting to be begun.
type job struct {
	ctx   context.Context // its caller's
	rk    string
	build intentFunc

	taken bool          // s.mu must be held: a leader has it
	done  chan struct{} // closed once begun (or failed)

	intent  api.Reservation
	rev     uint64
	applied bool
	rej     *api.QuotaRejection
	err     error
}

func (j *job) result() (api.Reservation, uint64, bool, *api.QuotaRejection, error) {
	return j.intent, j.rev, j.applied, j.rej, j.err
}

// begin writes a transaction's intent and decides it (steps 1 and 2),
// in a batch with the project's other transactions waiting at the same
// time. It returns errBusy when the key holds another transaction's
// intent.
func (s *Service) begin(ctx context.Context, project, rk string, build intentFunc) (api.Reservation, uint64, bool, *api.QuotaRejection, error) {
	j := &job{ctx: ctx, rk: rk, build: build, done: make(chan struct{})}
	s.mu.Lock()
	s.waiting[project] = append(s.waiting[project], j)
	s.mu.Unlock()
	l := s.lockOf(project)
	select {
	case l <- struct{}{}:
	case <-j.done:
		return j.result()
	case <-ctx.Done():
		if s.withdraw(project, j) {
			return api.Reservation{}, 0, false, nil, fmt.Errorf("wait for project %s: %w", project, ctx.Err())
		}
		<-j.done // a leader has it: its batch is bounded by batchTimeout
		return j.result()
	}
	batch := s.takeBatch(project, j)
	if batch == nil { // a leader before this one began it
		<-l
		<-j.done
		return j.result()
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	bctx, stop := s.bus.UntilDisconnected(bctx)
	s.beginBatch(bctx, project, batch)
	stop()
	cancel()
	for _, b := range batch {
		close(b.done)
	}
	<-l
	return j.result()
}

// withdraw removes j from its project's waiting list, unless a leader has
// taken it.
func (s *Service) withdraw(project string, j *job) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.taken {
		return false
	}
	s.waiting[project] = slices.DeleteFunc(s.waiting[project], func(o *job) bool { return o == j })
	if len(s.waiting[project]) == 0 {
		delete(s.waiting, project)
	}
	return true
}

// takeBatch takes, for the leader j, up to maxBatch waiting transactions
// of project in arrival order, j among them; nil when j was taken by an
// earlier leader. Those whose caller gave up meanwhile are dropped.
func (s *Service) takeBatch(project string, j *job) []*job {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.taken {
		return nil
	}
	var batch, rest []*job
	for _, o := range s.waiting[project] {
		switch {
		case o.ctx.Err() != nil && o != j:
			rest = append(rest, o) // its own select withdraws it
		case len(batch) < maxBatch-1 || o == j:
			o.taken = true
			batch = append(batch, o)
		default:
			rest = append(rest, o)
		}
	}
	if !j.taken { // only when more than maxBatch came first
		j.taken = true
		batch = append(batch, j)
	}
	if len(rest) == 0 {
		delete(s.waiting, project)
	} else {
		s.waiting[project] = rest
	}
	return batch
}

// beginBatch begins every transaction of batch under the project's lock,
// which the caller holds: one read of the ledger, the intents written
// concurrently, and one decision for all of them.
func (s *Service) beginBatch(ctx context.Context, project string, batch []*job) {
	s.batches.Add(1)
	fail := func(err error, jobs []*job) {
		for _, j := range jobs {
			if j.err == nil {
				j.err = err
			}
		}
	}
	l, err := s.readLedger(ctx, project)
	if err != nil {
		fail(err, batch)
		return
	}
	var wg sync.WaitGroup
	for _, j := range batch {
		wg.Go(func() { j.rev, j.err = s.writeIntent(ctx, l, j) })
	}
	wg.Wait()
	var written []*job
	for _, j := range batch {
		if j.err == nil {
			written = append(written, j)
		}
	}
	if len(written) == 0 {
		return
	}
	if err := s.step("intent"); err != nil {
		fail(err, written)
		return
	}
	s.decideAll(ctx, project, written)
}

// writeIntent writes j's intent on its key (step 1), with the Seq of
// ledger l, which it only reads.
func (s *Service) writeIntent(ctx context.Context, l *api.Ledger, j *job) (uint64, error) {
	guess, ok := s.mirrored(j.rk)
	return s.update(ctx, j.rk, guess, ok, func(cur []byte, exists bool) ([]byte, error) {
		var held *api.Reservation
		if exists {
			r, err := decodeReservation(cur)
			if err != nil {
				return nil, err
			}
			if r.State != api.ReservationCommitted {
				return nil, errBusy
			}
			held = &r
		}
		intent, err := j.build(l, held)
		if err != nil {
			return nil, err
		}
		intent.Seq = l.Seq
		j.intent = intent
		return json.Marshal(intent)
	})
}

// decideAll decides the written intents of jobs (step 2) in one
// compare-and-set of the project's ledger, in order. When the ledger no
// longer holds an outcome one of them needs (the slow path of the outcome
// ring), each is decided on its own, which recounts.
func (s *Service) decideAll(ctx context.Context, project string, jobs []*job) {
	err := s.writeLedger(ctx, project, func(l *api.Ledger) error {
		changed := false
		for _, j := range jobs {
			r := j.intent
			if o, ok := outcome(l, r.Txn); ok {
				j.applied, j.rej = o == api.TxnApplied, nil
				if !j.applied {
					j.rej = s.check(l, r)
				}
				continue
			}
			if !covers(l, r.Seq) || r.Aborted {
				return errUnknown
			}
			j.rej = s.check(l, r)
			j.applied = j.rej == nil
			if j.applied {
				apply(l, r)
			}
			record(l, r.Txn, j.applied)
			changed = true
		}
		if !changed {
			return bus.ErrNoChange
		}
		return nil
	})
	switch {
	case errors.Is(err, errUnknown):
		for _, j := range jobs {
			j.applied, j.rej, j.err = s.decide(ctx, j.intent)
		}
	case err != nil && !errors.Is(err, bus.ErrNoChange):
		for _, j := range jobs {
			j.applied, j.rej, j.err = false, nil, fmt.Errorf("decide %s: %w", j.intent.Key, err)
		}
	}
}

// lockOf returns project's lock (a send takes it, a receive gives it
// back).
func (s *Service) lockOf(project string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.locks[project]
	if !ok {
		l = make(chan struct{}, 1)
		s.locks[project] = l
	}
	return l
}
