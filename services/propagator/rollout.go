package propagator

import (
	"encoding/json"

	"atoll.dev/libs/api"
)

// An App's template change rolls out one zone at a time
// (services/aggregator/rollout): the aggregator's rollout controller
// keeps, per App, the stable template and which zones were given the
// spec's (bucket rollouts). A shard is rendered with
// Rollout.TemplateFor(its zone, the spec's template), so a zone moves to a
// new template only when the controller gives it; a change of the rollout
// document requeues the key like a placement change. Each App Deployment
// carries the hash of the template it runs (api.AnnoTemplate), which the
// aggregator observes to tell when a zone runs its revision, and rolls
// its pods within the App's availability budget (rollingUpdate).

// rolloutRev returns the revision of key's rollout in the mirror; 0 when
// there is none (or no mirror: tests).
func (s *Service) rolloutRev(key string) uint64 {
	if s.rollouts == nil {
		return 0
	}
	e, _ := s.rollouts.Get(key)
	return e.Revision
}

// rolloutOf returns key's rollout document and its revision from the
// mirror; nil and 0 when there is none (or no mirror: tests).
func (s *Service) rolloutOf(key string) (*api.Rollout, uint64) {
	if s.rollouts == nil {
		return nil, 0
	}
	e, ok := s.rollouts.Get(key)
	if !ok {
		return nil, 0
	}
	var r api.Rollout
	if err := json.Unmarshal(e.Value, &r); err != nil {
		s.log.Warn("undecodable rollout", "key", key, "err", err)
		return nil, e.Revision
	}
	return &r, e.Revision
}
