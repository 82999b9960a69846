package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// RemoteError is an error reply from a micro endpoint: its
// Nats-Service-Error-Code and Nats-Service-Error headers, and the body.
type RemoteError struct {
	// Code is the service's error code, HTTP-like: 4xx for the caller's
	// fault, 5xx for the service's.
	Code int
	// Description is the service's error text.
	Description string
	// Body is the reply payload, often a structured error document.
	Body []byte
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("remote error %d: %s", e.Code, e.Description)
}

// ErrBusUnavailable marks a call that failed while the caller's own NATS
// connection was down, reconnecting, or had reconnected moments before
// (the services that answer re-subscribe as they reconnect): an outage of
// the bus, not of the target. Such failures are retried and never count
// against the target's breaker.
var ErrBusUnavailable = errors.New("bus unavailable")

// IsBusOutage reports whether err is the bus's own outage rather than the
// target's: ErrBusUnavailable, or the connection closed, disconnected,
// reconnecting or draining.
func IsBusOutage(err error) bool {
	return errors.Is(err, ErrBusUnavailable) ||
		errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrConnectionDraining)
}

// IsTargetFailure is the failure rule of the request breakers. These count
// against a target, open its breaker and are retried:
//   - no reply in time (nats.ErrTimeout or the attempt's deadline),
//   - no responders on the subject while the connection is up (the
//     service is down),
//   - a RemoteError with a 5xx code (the service says it failed).
//
// Not failures: RemoteErrors with other codes (validation, quota rejected,
// not found: the target answered correctly), never retried; the caller's
// own context being cancelled or past its deadline, never retried; and the
// bus's own outage (IsBusOutage), retried but counted neither way.
func IsTargetFailure(err error) bool {
	if err == nil {
		return false
	}
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Code >= 500
	}
	if errors.Is(err, errCallerDone) || IsBusOutage(err) {
		return false
	}
	return errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrNoResponders)
}

// retryable reports whether a call that failed with err may be tried again:
// a target failure, the bus's outage, or the target's breaker refusing.
func retryable(err error) bool {
	return IsTargetFailure(err) || IsBusOutage(err) || IsOpen(err)
}

var errCallerDone = errors.New("caller context done")

// RequestPolicy configures a Requester.
type RequestPolicy struct {
	// Timeout bounds each attempt (default 2s); the caller's context bounds
	// all. An attempt in flight when the connection drops ends then, as a
	// bus outage: its request or its reply was lost with the connection.
	Timeout time.Duration
	// RetryFor is how long a call keeps retrying target failures, the bus's
	// outage and an open breaker before it gives up (default 3s): a target
	// absent for two seconds, or a NATS reconnect, costs its callers
	// latency, not errors. The caller's context bounds it.
	RetryFor time.Duration
	// Attempts caps the tries of one call (0: as many as RetryFor allows).
	Attempts int
	// BaseDelay is the first retry delay, doubled each retry up to MaxDelay
	// and jittered by ±50% (default 50ms).
	BaseDelay time.Duration
	// MaxDelay caps the retry delay (default 250ms), so a target's return
	// is noticed soon.
	MaxDelay time.Duration
	// Settle is how long after the connection reconnects failures other
	// than a target's own error reply count as the bus's outage (default
	// 2s): the services re-subscribe as they reconnect too.
	Settle time.Duration
	// Breaker configures the per-target breakers; IsFailure is set to
	// IsTargetFailure and IsExcluded to the caller giving up or IsBusOutage.
	Breaker BreakerPolicy
}

// Requester makes request/reply calls, each target behind its own breaker.
type Requester struct {
	nc       *nats.Conn
	policy   RequestPolicy
	breakers *BreakerSet[*nats.Msg]

	mu          sync.Mutex
	reconnects  uint64    // mu must be held: nc's reconnect count last seen
	reconnected time.Time // mu must be held: when a new reconnect was first seen
	// lost is cancelled when the connection next drops (and replaced by a
	// new one): a request in flight then was lost with the connection, or
	// its reply will be, so its attempt ends at once rather than waiting
	// out its Timeout. mu must be held.
	lost    context.Context
	loseAll context.CancelFunc
}

// NewRequester returns a Requester on nc.
func NewRequester(nc *nats.Conn, p RequestPolicy) *Requester {
	if p.Timeout == 0 {
		p.Timeout = 2 * time.Second
	}
	if p.RetryFor == 0 {
		p.RetryFor = 3 * time.Second
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = 50 * time.Millisecond
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = 250 * time.Millisecond
	}
	if p.Settle == 0 {
		p.Settle = 2 * time.Second
	}
	p.Breaker.IsFailure = IsTargetFailure
	p.Breaker.IsExcluded = func(err error) bool { return errors.Is(err, errCallerDone) || IsBusOutage(err) }
	r := &Requester{nc: nc, policy: p, breakers: NewBreakerSet[*nats.Msg](p.Breaker), reconnects: nc.Stats().Reconnects}
	r.lost, r.loseAll = context.WithCancel(context.Background())
	if !nc.IsClosed() {
		go r.watch(nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED))
	}
	return r
}

// watch ends the attempts in flight each time the connection drops, until
// it is closed.
func (r *Requester) watch(ch chan nats.Status) {
	for s := range ch {
		r.mu.Lock()
		r.loseAll()
		if s == nats.CLOSED {
			r.mu.Unlock()
			r.nc.RemoveStatusListener(ch)
			return
		}
		r.lost, r.loseAll = context.WithCancel(context.Background())
		r.mu.Unlock()
	}
}

// Breakers exposes the per-target breakers (for health and tests).
func (r *Requester) Breakers() *BreakerSet[*nats.Msg] { return r.breakers }

// Request sends data to subject through target's breaker and returns the
// reply body. Target failures (see IsTargetFailure), the bus's own outage
// and an open breaker (gobreaker.ErrOpenState) are retried with jittered
// exponential backoff for up to RetryFor: callers wait out a brief outage
// while the breaker keeps all but its probes off a failing target.
func (r *Requester) Request(ctx context.Context, target, subject string, data []byte) ([]byte, error) {
	return r.RequestWithHeader(ctx, target, subject, data, nil)
}

// Headers a caller sets on a request on behalf of the user it serves.
const (
	// HeaderPrincipal names the user (the gateway's authenticated subject).
	HeaderPrincipal = "Atoll-Principal"
	// HeaderPlatformAdmin is "true" when that user is a platform admin.
	HeaderPlatformAdmin = "Atoll-Platform-Admin"
	// HeaderTimeout is how long the caller waits for the reply, in
	// milliseconds from the request's sending (gRPC's grpc-timeout): a
	// Requester sets it on each attempt, and an endpoint (Bus.Serve)
	// stops working on a request when its caller has stopped waiting,
	// rather than doing, after an outage, every attempt its callers
	// gave up on and retried.
	HeaderTimeout = "Atoll-Timeout"
)

// RequestWithHeader is Request with headers on the request message.
func (r *Requester) RequestWithHeader(ctx context.Context, target, subject string, data []byte, hdr nats.Header) ([]byte, error) {
	var last error
	start := time.Now()
	delay := r.policy.BaseDelay
	for attempt := 1; ; attempt++ {
		msg, err := r.breakers.Execute(target, func() (*nats.Msg, error) { return r.once(ctx, subject, data, hdr) })
		if err == nil {
			return msg.Data, nil
		}
		last = err
		wait := Jitter(delay, 0.5)
		if !retryable(err) || attempt == r.policy.Attempts || time.Since(start)+wait > r.policy.RetryFor {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("request %s: %w (after %w)", subject, ctx.Err(), last)
		case <-t.C:
		}
		delay = min(2*delay, r.policy.MaxDelay)
	}
	if IsOpen(last) {
		return nil, fmt.Errorf("request %s: breaker for %s open: %w", subject, target, last)
	}
	return nil, fmt.Errorf("request %s: %w", subject, last)
}

func (r *Requester) once(ctx context.Context, subject string, data []byte, hdr nats.Header) (*nats.Msg, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", errCallerDone, ctx.Err())
	}
	r.mu.Lock()
	lost := r.lost
	r.mu.Unlock()
	up, reconnects := r.nc.IsConnected(), r.nc.Stats().Reconnects
	actx, cancel := context.WithTimeout(ctx, r.policy.Timeout)
	defer cancel()
	defer context.AfterFunc(lost, cancel)()
	msg, err := r.nc.RequestMsgWithContext(actx, &nats.Msg{Subject: subject, Data: data, Header: withTimeout(actx, hdr)})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", errCallerDone, ctx.Err())
		}
		if lost.Err() != nil || !up || r.settling(reconnects) {
			return nil, fmt.Errorf("%w: %w", ErrBusUnavailable, err)
		}
		return nil, err
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		return nil, &RemoteError{Code: n, Description: msg.Header.Get(micro.ErrorHeader), Body: msg.Data}
	}
	return msg, nil
}

// withTimeout returns a copy of hdr saying, in HeaderTimeout, how long
// is left before ctx's deadline.
func withTimeout(ctx context.Context, hdr nats.Header) nats.Header {
	out := make(nats.Header, len(hdr)+1)
	for k, v := range hdr {
		out[k] = v
	}
	if d, ok := ctx.Deadline(); ok {
		out.Set(HeaderTimeout, strconv.FormatInt(max(time.Until(d).Milliseconds(), 1), 10))
	}
	return out
}

// callerTimeout is how long the caller of r waits for the reply
// (HeaderTimeout), if it says.
func callerTimeout(r micro.Request) (time.Duration, bool) {
	ms, err := strconv.ParseInt(r.Headers().Get(HeaderTimeout), 10, 64)
	if err != nil || ms <= 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// settling reports whether the connection is down now, reconnected since
// a call began (its reconnect count was before), or reconnected less than
// Settle ago.
func (r *Requester) settling(before uint64) bool {
	if !r.nc.IsConnected() {
		return true
	}
	now := r.nc.Stats().Reconnects
	r.mu.Lock()
	defer r.mu.Unlock()
	if now != r.reconnects {
		r.reconnects, r.reconnected = now, time.Now()
	}
	return now != before || time.Since(r.reconnected) < r.policy.Settle
}
