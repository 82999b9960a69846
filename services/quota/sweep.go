package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
)

// observe follows the mirror: it notes which reservation keys hold an
// intent, for the repair sweep.
func (s *Service) observe(key string) {
	if !strings.HasPrefix(key, api.QuotaReservationPrefix) {
		return
	}
	<-s.mirrorSet
	pending := false
	if e, ok := s.mirror.Get(key); ok {
		var r struct {
			State api.ReservationState `json:"state"`
		}
		pending = json.Unmarshal(e.Value, &r) == nil && r.State != api.ReservationCommitted
	}
	_, exists := s.mirror.Get(key)
	replaying := true
	select {
	case <-s.mirror.Ready():
		replaying = false
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !pending {
		delete(s.intents, key)
	} else if _, ok := s.intents[key]; !ok {
		s.intents[key] = time.Now()
	}
	switch {
	case !exists || pending:
		delete(s.orphans, key)
	case !replaying:
		// A reservation committed now is checked once, OrphanAge later;
		// those replayed at start are the full sweep's.
		s.orphans[key] = time.Now().Add(s.orphanAge)
	}
}

// CheckOrphans checks each reservation committed at least OrphanAge ago
// and not checked yet: one read of its workload's key, and a release when
// the workload is missing. Its cost is per new reservation, not per
// reservation held.
func (s *Service) CheckOrphans(ctx context.Context) error {
	now := time.Now()
	var due []string
	s.mu.Lock()
	for k, at := range s.orphans {
		if !at.After(now) {
			due = append(due, k)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, k := range due {
		if err := s.checkOrphan(ctx, k); err != nil {
			errs = append(errs, err)
			continue
		}
		s.mu.Lock()
		if at, ok := s.orphans[k]; ok && !at.After(now) {
			delete(s.orphans, k)
		}
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

func (s *Service) checkOrphan(ctx context.Context, key string) error {
	e, ok := s.mirror.Get(key)
	if !ok {
		return nil
	}
	r, err := decodeReservation(e.Value)
	if err != nil || r.State != api.ReservationCommitted {
		return nil
	}
	if _, err := s.workloads.Get(ctx, r.Key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		if err != nil {
			return fmt.Errorf("orphan check %s: %w", r.Key, err)
		}
		return nil
	}
	s.log.Info("releasing orphaned reservation", "project", r.Project, "key", r.Key)
	return s.release(ctx, r.Project, r.Key, r.Txn)
}

// RepairOnce decides and finishes every intent seen for at least age (its
// owner died or hangs; see the package comment).
func (s *Service) RepairOnce(ctx context.Context, age time.Duration) error {
	cutoff := time.Now().Add(-age)
	var due []string
	s.mu.Lock()
	for k, seen := range s.intents {
		if !seen.After(cutoff) {
			due = append(due, k)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, k := range due {
		if err := s.finishKey(ctx, k); err != nil {
			errs = append(errs, fmt.Errorf("repair %s: %w", k, err))
		}
	}
	if len(due) > 0 {
		s.log.Info("repaired intents", "count", len(due), "failed", len(errs))
	}
	return errors.Join(errs...)
}

// SweepOnce releases reservations older than age whose workload is missing.
func (s *Service) SweepOnce(ctx context.Context, age time.Duration) error {
	select {
	case <-s.mirror.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	cutoff := time.Now().Add(-age)
	var old []api.Reservation
	for _, k := range s.mirror.Keys() {
		if !strings.HasPrefix(k, api.QuotaReservationPrefix) {
			continue
		}
		e, ok := s.mirror.Get(k)
		if !ok {
			continue
		}
		r, err := decodeReservation(e.Value)
		if err != nil {
			s.log.Warn("unreadable reservation", "key", k, "err", err)
			continue
		}
		if r.State == api.ReservationCommitted && r.At.Before(cutoff) {
			old = append(old, r)
		}
	}
	if len(old) == 0 {
		return nil
	}
	live, err := s.workloadKeys(ctx)
	if err != nil {
		return err
	}
	for _, r := range old {
		if live[r.Key] {
			continue
		}
		s.log.Info("releasing orphaned reservation", "project", r.Project, "key", r.Key)
		if err := s.release(ctx, r.Project, r.Key, r.Txn); err != nil {
			return err
		}
	}
	return nil
}

// workloadKeys lists the keys of the workloads bucket.
func (s *Service) workloadKeys(ctx context.Context) (map[string]bool, error) {
	live := map[string]bool{}
	lister, err := s.workloads.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return live, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list workloads: %w", err)
	}
	for k := range lister.Keys() {
		live[k] = true
	}
	return live, nil
}
