package admission

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

// Hosts are unique in the region. The index is a bucket of admission's
// own (bus.BucketHosts, one key per host, value api.HostClaim): admission
// is its only writer, as it is the workloads bucket's, and a claim is
// small and per host, so nothing grows with a project.
//
// The claim is written before the App, with compare-and-set, so of two
// Apps asking for one host at once only one gets it; the other is told
// 422 naming the owner. The claim is deleted when its App is deleted or
// changes host, and when the App's write does not happen. A replica that
// dies in between leaves a claim its owner does not back: the owner
// does not exist, or exposes another host. Such a claim is stale, and the
// next App asking for the host takes it over (compare-and-set on the
// claim's revision) once it is older than HostClaimGrace. A claim younger
// than that may be an admission in flight, which writes its App within
// claimWindow of its claim or gives up, so a takeover never races a
// write: HostClaimGrace minus claimWindow is the clock skew tolerated
// between admission replicas and the NATS servers that time the claims.

// HostClaimGrace is the age past which a claim its owner does not back is
// taken over.
const HostClaimGrace = 2 * RequestTimeout

// claimWindow is how long after its claim an admission may write its App.
const claimWindow = RequestTimeout

// claimAttempts bounds the races lost on one host's claim.
const claimAttempts = 10

// hostClaim is one write's hold on its App's host.
type hostClaim struct {
	host string
	// rev is the claim's revision this write made; 0 when the App already
	// held the host and nothing was written.
	rev uint64
	// at is when the claim was written.
	at time.Time
}

// ready says whether the App may still be written with this claim; an
// error when the claim is too old to be trusted.
func (c *hostClaim) ready() error {
	if c == nil || c.rev == 0 || time.Since(c.at) < claimWindow {
		return nil
	}
	return unavailable(fmt.Errorf("the claim of host %s is older than %s; retry", c.host, claimWindow))
}

// claimHost claims w's host for it, when w is an exposed App; nil, nil
// when it is not. A host another App holds is a 422 naming that App.
func (s *Service) claimHost(ctx context.Context, w *api.Workload) (*hostClaim, error) {
	host := api.HostOf(w)
	if host == "" {
		return nil, nil
	}
	me := api.HostClaim{Project: w.Metadata.Project, Name: w.Metadata.Name}
	body, err := json.Marshal(me)
	if err != nil {
		return nil, err
	}
	for range claimAttempts {
		var rev uint64
		e, err := s.hosts.Get(ctx, host)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, unavailable(fmt.Errorf("read claim of host %s: %w", host, err))
		default:
			var c api.HostClaim
			if err := json.Unmarshal(e.Value(), &c); err != nil {
				return nil, unavailable(fmt.Errorf("decode claim of host %s: %w", host, err))
			}
			backed, err := s.backs(ctx, c, host)
			if err != nil {
				return nil, err
			}
			switch {
			case c == me && backed:
				return &hostClaim{host: host}, nil
			case c != me && (backed || time.Since(e.Created()) < s.claimGrace):
				return nil, hostTaken(host, c)
			}
			// Ours but not backed yet (being acquired, so written again:
			// fresh, and a stale takeover of it conflicts), or stale.
			rev = e.Revision()
		}
		at := time.Now()
		n, err := bus.CompareAndSet(ctx, s.hosts, host, body, rev)
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, unavailable(fmt.Errorf("claim host %s: %w", host, err))
		}
		return &hostClaim{host: host, rev: n, at: at}, nil
	}
	return nil, &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "Conflict", Message: fmt.Sprintf("host %s is being claimed concurrently; retry", host)}}
}

// backs says whether the claim's owner is stored exposing host.
func (s *Service) backs(ctx context.Context, c api.HostClaim, host string) (bool, error) {
	w, _, err := s.get(ctx, api.Key(c.Project, api.KindApp, c.Name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, unavailable(fmt.Errorf("read owner of host %s: %w", host, err))
	}
	return api.HostOf(w) == host, nil
}

// hostTaken is the 422 of an App asking for a host another App holds.
func hostTaken(host string, owner api.HostClaim) *Error {
	return invalid(api.FieldErrors{{Field: "spec.expose.host", Code: api.CodeDuplicate,
		Reason: fmt.Sprintf("host %q is exposed by App %s", host, owner.Owner())}})
}

// undo deletes the claim this write made, after the App's write did not
// happen; a claim the App already held stays.
func (c *hostClaim) undo(ctx context.Context, s *Service) {
	if c == nil || c.rev == 0 {
		return
	}
	s.dropClaim(ctx, c.host, c.rev)
}

// releaseHost deletes host's claim if it is still project/name's, after
// that App was deleted or changed host. A claim left behind (this fails,
// or the replica dies first) is stale and taken over after HostClaimGrace.
func (s *Service) releaseHost(ctx context.Context, project, name, host string) {
	if host == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	defer cancel()
	e, err := s.hosts.Get(ctx, host)
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			s.log.Warn("release host: read claim", "host", host, "err", err)
		}
		return
	}
	var c api.HostClaim
	if json.Unmarshal(e.Value(), &c) != nil || c != (api.HostClaim{Project: project, Name: name}) {
		return
	}
	s.dropClaim(ctx, host, e.Revision())
}

// dropClaim deletes host's claim at revision rev.
func (s *Service) dropClaim(ctx context.Context, host string, rev uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	defer cancel()
	if _, err := bus.CompareAndDelete(ctx, s.bus.JS, s.hosts, host, rev); err != nil && !errors.Is(err, bus.ErrConflict) {
		s.log.Warn("release host claim; it goes stale", "host", host, "err", err)
	}
}
