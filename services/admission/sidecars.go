package admission

import (
	"context"
	"encoding/json"
	"fmt"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// The managed sidecars are platform configuration with versions
// (libs/api sidecars.go), kept in bus.BucketSidecars, which the gateway
// writes for platform admins. Admission mirrors the current version and
// injects it (mutate); until a platform admin sets the first version, the
// sidecars of admission's own configuration (Config.Sidecars) are
// injected, recorded as version 0.

// startSidecars mirrors the current version of the managed sidecars and
// waits for the mirror's first replay, so the first request admitted
// already sees the version in the bucket.
func (s *Service) startSidecars(ctx context.Context) error {
	m, err := bus.MirrorOf(context.WithoutCancel(ctx), s.bus, bus.BucketSidecars, api.SidecarCurrentKey, decodeSidecarVersion, nil)
	if err != nil {
		return fmt.Errorf("mirror %s: %w", bus.BucketSidecars, err)
	}
	select {
	case <-m.Ready():
	case <-ctx.Done():
		m.Stop()
		return ctx.Err()
	}
	s.sidecars = m
	return nil
}

func decodeSidecarVersion(b []byte) (*api.SidecarVersion, error) {
	var v api.SidecarVersion
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// currentSidecars returns the current version of the managed sidecars;
// nil when none was ever set (or before Start: tests). The caller must not
// modify it.
func (s *Service) currentSidecars() *api.SidecarVersion {
	if s.sidecars == nil {
		return nil
	}
	e, ok := s.sidecars.Get(api.SidecarCurrentKey)
	if !ok || e.Err != nil || e.Value == nil {
		return nil
	}
	return e.Value
}
