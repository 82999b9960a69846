package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// keyIDer is a Sealer that names the KEK it seals for (libs/envelope's).
type keyIDer interface{ KeyID() string }

// rewrap is bus.AdmissionRewrap: the propagator, which alone can unwrap a
// Secret's data key, rewrapped it for a new KEK during a rotation
// (atoll-admin rotate-kek), and admission, the bucket's one writer, stores
// it. Only the wrapping may change: the stored nonce and ciphertext must
// be the request's, so the values, their digest and version are the ones
// the Secret's writer set; and the KEK must be the one admission seals new
// values for, so that the old KEK ends up unreferenced. One
// compare-and-set on the revision the propagator read: a Secret changed
// meanwhile is refused (409) and looked at again by the next call.
func (s *Service) rewrap(ctx context.Context, req api.SecretRewrap, _ micro.Request) (api.Ack, error) {
	if err := s.Rewrap(ctx, req); err != nil {
		return nil, err
	}
	return api.Ack{"rewrapped": true}, nil
}

// Rewrap stores a Secret's rewrapped sealed data (see rewrap).
func (s *Service) Rewrap(ctx context.Context, req api.SecretRewrap) error {
	if cur, ok := s.cfg.Sealer.(keyIDer); ok && cur.KeyID() != req.Sealed.KeyID {
		return bus.Errorf(api.StatusConflict, "WrongKey",
			"admission seals Secrets for kek %q, not %q: give admission %q's public key (--kek-public) before rotating to it", cur.KeyID(), req.Sealed.KeyID, req.Sealed.KeyID)
	}
	key := api.Key(req.Project, api.KindSecret, req.Name)
	stored, rev, err := s.get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return bus.Errorf(api.StatusNotFound, "NotFound", "%s not found", key)
	}
	if err != nil {
		return unavailable(err)
	}
	if rev != req.Revision {
		return bus.Errorf(api.StatusConflict, "Conflict", "%s is at revision %d, not %d: changed meanwhile", key, rev, req.Revision)
	}
	spec, ok := stored.Spec.(*api.SecretSpec)
	if !ok || spec.Sealed == nil {
		return bus.Errorf(api.StatusUnprocessable, "Invalid", "%s holds no sealed values", key)
	}
	if !bytes.Equal(spec.Sealed.Nonce, req.Sealed.Nonce) || !bytes.Equal(spec.Sealed.Ciphertext, req.Sealed.Ciphertext) || len(req.Sealed.WrappedKey) == 0 {
		return bus.Errorf(api.StatusUnprocessable, "Invalid", "%s: a rewrap changes the wrapped key and its kek only, never the values", key)
	}
	sealed := req.Sealed
	spec.Sealed = &sealed
	b, err := json.Marshal(stored)
	if err != nil {
		return unavailable(fmt.Errorf("encode %s: %w", key, err))
	}
	if _, err := bus.CompareAndSet(ctx, s.workloads, key, b, rev); errors.Is(err, bus.ErrConflict) {
		return bus.Errorf(api.StatusConflict, "Conflict", "%s changed meanwhile", key)
	} else if err != nil {
		return unavailable(err)
	}
	s.log.Info("secret rewrapped", "key", key, "kek", req.Sealed.KeyID)
	return nil
}
