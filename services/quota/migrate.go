package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// legacyLedger is the previous layout: one key per project, named by the
// project, holding every reservation.
type legacyLedger struct {
	Limits       map[api.Tier]api.Limit `json:"limits"`
	Reservations map[string]struct {
		Demand api.Demand `json:"demand"`
		At     time.Time  `json:"at"`
	} `json:"reservations"`
}

// migrate moves the ledgers of the previous layout (single-token keys:
// the new ones all start with p. or r.) to a ledger and a key per
// reservation, then deletes them. It runs before the endpoints are served;
// replicas starting together only race on creates, and the loser skips.
func (s *Service) migrate(ctx context.Context) error {
	lister, err := s.kv.ListKeysFiltered(ctx, "*")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list legacy ledgers: %w", err)
	}
	var projects []string
	for k := range lister.Keys() {
		projects = append(projects, k)
	}
	for _, project := range projects {
		if err := s.migrateProject(ctx, project); err != nil {
			return fmt.Errorf("migrate ledger %s: %w", project, err)
		}
	}
	return nil
}

func (s *Service) migrateProject(ctx context.Context, project string) error {
	e, err := s.kv.Get(ctx, project)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var old legacyLedger
	if err := json.Unmarshal(e.Value(), &old); err != nil {
		return err
	}
	l, err := decodeLedger(project, nil, false)
	if err != nil {
		return err
	}
	for t, lim := range old.Limits {
		l.Limits[t] = lim
	}
	for key, r := range old.Reservations {
		b, err := json.Marshal(api.Reservation{Project: project, Key: key, State: api.ReservationCommitted, Demand: r.Demand, At: r.At})
		if err != nil {
			return err
		}
		if _, err := bus.CompareAndSet(ctx, s.kv, api.QuotaReservationKey(project, key), b, 0); err != nil && !errors.Is(err, bus.ErrConflict) {
			return err
		}
		apply(l, api.Reservation{State: api.ReservationPending, Demand: r.Demand})
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if _, err := bus.CompareAndSet(ctx, s.kv, api.QuotaProjectKey(project), b, 0); err != nil && !errors.Is(err, bus.ErrConflict) {
		return err
	}
	if _, err := bus.CompareAndDelete(ctx, s.bus.JS, s.kv, project, e.Revision()); err != nil && !errors.Is(err, bus.ErrConflict) {
		return err
	}
	s.log.Info("migrated ledger to a key per reservation", "project", project, "reservations", len(old.Reservations))
	return nil
}
