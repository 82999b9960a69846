package admission

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// SetBeforeWrite sets the hook each write attempt runs after its
// reservation, just before its compare-and-set.
func SetBeforeWrite(s *Service, f func(ctx context.Context, key string)) { s.hooks.beforeWrite = f }

// Crash makes s a replica that dies right after each write: writes return
// without publishing their event, and Start runs no repair loop.
func Crash(s *Service) { s.hooks.crashed.Store(true) }

// RepairKey repairs key once, as the repair loop does the first time it
// looks at a write: its event, then its quota check.
func RepairKey(ctx context.Context, s *Service, key string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m, err := bus.MirrorOf(ctx, s.bus, bus.BucketWorkloads, jetstream.AllKeys, decodeRepairDoc, nil)
	if err != nil {
		return err
	}
	defer m.Stop()
	<-m.Ready()
	if err := s.repairKey(ctx, m, key); err != nil {
		return err
	}
	quota, err := s.bus.KV(ctx, bus.BucketQuota)
	if err != nil {
		return err
	}
	checks := &quotaChecks{due: map[string]time.Time{}}
	checks.mark(key, time.Now())
	return s.quotaCheckKey(ctx, m, quota, checks, key)
}

// SetHostClaimGrace sets the age past which a stale host claim is taken over.
func SetHostClaimGrace(s *Service, d time.Duration) { s.claimGrace = d }

// Get reads a stored workload.
func Get(ctx context.Context, s *Service, key string) (*api.Workload, error) {
	w, _, err := s.get(ctx, key)
	return w, err
}

// SetSidecarTiming shortens the sidecar rollout's periods: how often it
// looks, a move's deadline and the bake time.
func SetSidecarTiming(s *Service, every, deadline, bake time.Duration) {
	s.sidecarTiming = sidecarTiming{every: every, deadline: deadline, bake: bake}
}
