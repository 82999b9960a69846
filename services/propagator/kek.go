package propagator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/envelope"
)

// Rotation of the key-encryption key (atoll-admin rotate-kek): the
// propagator alone holds the private KEKs (Config.Keyring), so it unwraps
// each stored Secret's data key and wraps it for the new KEK; admission,
// the workloads bucket's one writer, stores the result
// (bus.AdmissionRewrap, compare-and-set on the revision read here). The
// values are never decrypted nor re-encrypted. Any replica answers: a
// rotation is idempotent and every write is a compare-and-set.
const (
	// RotateTimeout bounds one call of bus.PropagatorRotateKEK.
	RotateTimeout = time.Minute
	// RotateLimit is how many Secrets one call rewraps by default, and
	// RotateMaxLimit at most.
	RotateLimit    = 100
	RotateMaxLimit = 1000
)

// rewrapper is what a rotation needs of Config.Keyring: libs/envelope's
// Keyring, which holds the private KEKs.
type rewrapper interface {
	Sealer(id string) (*envelope.Sealer, error)
	Rewrap(d api.SealedData, to *envelope.Sealer) (api.SealedData, error)
}

// startKEK serves bus.PropagatorRotateKEK.
func (s *Service) startKEK(ctx context.Context) error {
	kv, err := s.bus.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		return err
	}
	s.workloadsKV = kv
	s.admission = bus.NewRequester(s.bus.NC, bus.RequestPolicy{Breaker: bus.BreakerPolicy{Logger: s.log}})
	s.kekOps, err = s.bus.Serve(context.WithoutCancel(ctx),
		bus.ServeConfig{Name: bus.UserPropagator, Description: "key-encryption key rotation", Concurrency: 1, Metrics: s.metrics, Logger: s.log},
		bus.PropagatorRotateKEK.Endpoint(RotateTimeout, s.rotateKEK),
		bus.PropagatorRemoveProject.Endpoint(RotateTimeout, s.removeProject)) // projectremove.go
	return err
}

// stopKEK stops serving bus.PropagatorRotateKEK.
func (s *Service) stopKEK() {
	if s.kekOps != nil {
		_ = s.kekOps.Stop() // the connection closes after
		s.kekOps = nil
	}
}

func (s *Service) rotateKEK(ctx context.Context, req api.KEKRotation, _ micro.Request) (api.KEKRotationResult, error) {
	return s.RotateKEK(ctx, req)
}

// RotateKEK rewraps, for req.To, the data keys of up to req.Limit stored
// Secrets sealed under another KEK, and counts what is left.
func (s *Service) RotateKEK(ctx context.Context, req api.KEKRotation) (api.KEKRotationResult, error) {
	res := api.KEKRotationResult{To: req.To, Keys: map[string]int{}}
	kr, ok := s.keyring.(rewrapper)
	if !ok {
		return res, bus.Errorf(http.StatusServiceUnavailable, "NoKeys", "the propagator holds no key-encryption keys (--kek-dir)")
	}
	to, err := kr.Sealer(req.To)
	if err != nil {
		return res, bus.Errorf(http.StatusConflict, "NoKey", "the propagator holds no kek %q: add kek-%s.key to its --kek-dir first (%v)", req.To, req.To, err)
	}
	if err := s.waitFilled(ctx); err != nil {
		return res, err
	}
	limit := req.Limit
	if limit <= 0 {
		limit = RotateLimit
	}
	limit = min(limit, RotateMaxLimit)
	tried := 0
	// The mirror lists the Secrets and their KEKs; a Secret to rewrap is
	// read again from the bucket, for its latest sealed data and the
	// revision the compare-and-set needs (the mirror may lag a rewrap
	// just stored).
	for _, key := range slices.Sorted(slices.Values(s.workloads.Keys())) {
		project, kind, name, err := api.ParseKey(key)
		if err != nil || kind != api.KindSecret {
			continue
		}
		me, ok := s.workloads.Get(key)
		if !ok {
			continue
		}
		sealed, err := storedSealed(me.Value)
		if err != nil {
			res.Failed = append(res.Failed, fmt.Sprintf("%s: %v", key, err))
			continue
		}
		if sealed == nil {
			continue
		}
		res.Secrets++
		kid := sealed.KeyID
		if kid != to.KeyID() && tried < limit {
			tried++
			switch rewrapped, err := s.rotateSecret(ctx, kr, key, project, name, to); {
			case err != nil:
				res.Failed = append(res.Failed, fmt.Sprintf("%s: %v", key, err))
			case rewrapped:
				kid = to.KeyID()
				res.Rewrapped++
			default: // rewrapped already: the mirror had not seen it yet
				kid = to.KeyID()
			}
		}
		res.Keys[kid]++
		if kid != to.KeyID() {
			res.Pending++
		}
	}
	s.log.Info("kek rotation pass", "to", req.To, "secrets", res.Secrets, "rewrapped", res.Rewrapped, "pending", res.Pending, "failed", len(res.Failed))
	return res, nil
}

// storedSealed is a stored workload's sealed data when it is a sealed
// Secret (nil otherwise).
func storedSealed(b []byte) (*api.SealedData, error) {
	w, err := api.Decode(b)
	if err != nil {
		return nil, err
	}
	if spec, ok := w.Spec.(*api.SecretSpec); ok {
		return spec.Sealed, nil
	}
	return nil, nil
}

// rotateSecret reads Secret key from the bucket and, unless it is sealed
// under to already (false, nil), rewraps its data key for to and has
// admission store it (true, nil).
func (s *Service) rotateSecret(ctx context.Context, kr rewrapper, key, project, name string, to *envelope.Sealer) (bool, error) {
	e, err := s.workloadsKV.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, errors.New("deleted meanwhile")
	}
	if err != nil {
		return false, fmt.Errorf("read: %w", err)
	}
	sealed, err := storedSealed(e.Value())
	if err != nil || sealed == nil {
		return false, cmp.Or(err, errors.New("no sealed values"))
	}
	if sealed.KeyID == to.KeyID() {
		return false, nil
	}
	nd, err := kr.Rewrap(*sealed, to)
	if err != nil {
		return false, err
	}
	if err := bus.AdmissionRewrap.Send(ctx, s.admission, api.SecretRewrap{Project: project, Name: name, Revision: e.Revision(), Sealed: nd}); err != nil {
		return false, err
	}
	return true, nil
}
