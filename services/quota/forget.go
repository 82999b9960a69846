package quota

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// ForgetProject deletes a deleted project's ledger (its limits), once it
// holds no reservation: admission calls it when it finishes a project's
// deletion, so that nothing of the project is left in the quota bucket.
// A project of the same name made later starts from the region's defaults.
func (s *Service) ForgetProject(ctx context.Context, project string) error {
	ctx, unlock, err := s.lock(ctx, project)
	if err != nil {
		return fmt.Errorf("forget %s: %w", project, err)
	}
	defer unlock()
	key := api.QuotaProjectKey(project)
	v, rev, err := s.bus.Latest(ctx, bus.BucketQuota, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return s.forgetRequests(ctx, project)
	}
	if err != nil {
		return fmt.Errorf("read ledger %s: %w", project, err)
	}
	l, err := decodeLedger(project, v, true)
	if err != nil {
		return err
	}
	if l.Reservations > 0 {
		return bus.Errorf(api.StatusConflict, "NotEmpty", "project %s still holds %d reservations", project, l.Reservations)
	}
	if err := s.forgetRequests(ctx, project); err != nil {
		return err
	}
	if _, err := bus.CompareAndDelete(ctx, s.bus.JS, s.kv, key, rev); err != nil {
		return fmt.Errorf("forget %s: %w", project, err)
	}
	s.mu.Lock()
	delete(s.ledgers, project)
	s.mu.Unlock()
	s.log.Info("ledger of a deleted project forgotten", "project", project)
	return nil
}

// forgetRequests deletes the project's quota requests (requests.go).
func (s *Service) forgetRequests(ctx context.Context, project string) error {
	lister, err := s.kv.ListKeysFiltered(ctx, api.QuotaRequestProjectFilter(project))
	if err != nil {
		return fmt.Errorf("list quota requests of %s: %w", project, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := s.kv.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("forget quota request %s: %w", k, err)
		}
	}
	return nil
}

func (s *Service) handleForget(ctx context.Context, req api.ProjectRef, _ micro.Request) (api.Ack, error) {
	if !api.IsDNSLabel(req.Project) {
		return nil, bus.Errorf(api.StatusUnprocessable, "Invalid", "project is not a DNS label")
	}
	if err := s.ForgetProject(ctx, req.Project); err != nil {
		return nil, err
	}
	return api.Ack{"forgotten": true}, nil
}
