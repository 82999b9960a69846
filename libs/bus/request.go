package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/sony/gobreaker/v2"
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

// IsTargetFailure is the failure rule of the request breakers. These count
// against a target, open its breaker and are retried:
//   - no reply in time (nats.ErrTimeout or the attempt's deadline),
//   - no responders on the subject (the service is down),
//   - a lost or closed connection,
//   - a RemoteError with a 5xx code (the service says it failed).
//
// Not failures, never retried: RemoteErrors with other codes (validation,
// quota rejected, not found: the target answered correctly), and the caller's
// own context being cancelled or past its deadline.
func IsTargetFailure(err error) bool {
	if err == nil {
		return false
	}
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Code >= 500
	}
	if errors.Is(err, errCallerDone) {
		return false
	}
	return errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}

var errCallerDone = errors.New("caller context done")

// RequestPolicy configures a Requester.
type RequestPolicy struct {
	// Timeout bounds each attempt (default 2s); the caller's context bounds all.
	Timeout time.Duration
	// Attempts is the number of tries on a target failure (default 3).
	Attempts int
	// BaseDelay is the first retry delay, doubled each retry and jittered
	// by ±50% (default 50ms).
	BaseDelay time.Duration
	// Breaker configures the per-target breakers; IsFailure is set to IsTargetFailure.
	Breaker BreakerPolicy
}

// Requester makes request/reply calls, each target behind its own breaker.
type Requester struct {
	nc       *nats.Conn
	policy   RequestPolicy
	breakers *BreakerSet[*nats.Msg]
}

// NewRequester returns a Requester on nc.
func NewRequester(nc *nats.Conn, p RequestPolicy) *Requester {
	if p.Timeout == 0 {
		p.Timeout = 2 * time.Second
	}
	if p.Attempts == 0 {
		p.Attempts = 3
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = 50 * time.Millisecond
	}
	p.Breaker.IsFailure = IsTargetFailure
	p.Breaker.IsExcluded = func(err error) bool { return errors.Is(err, errCallerDone) }
	return &Requester{nc: nc, policy: p, breakers: NewBreakerSet[*nats.Msg](p.Breaker)}
}

// Breakers exposes the per-target breakers (for health and tests).
func (r *Requester) Breakers() *BreakerSet[*nats.Msg] { return r.breakers }

// Request sends data to subject through target's breaker and returns the
// reply body. Target failures (see IsTargetFailure) are retried with jittered
// exponential backoff; an open breaker fails fast with gobreaker.ErrOpenState.
func (r *Requester) Request(ctx context.Context, target, subject string, data []byte) ([]byte, error) {
	return r.RequestWithHeader(ctx, target, subject, data, nil)
}

// Headers a caller sets on a request on behalf of the user it serves.
const (
	// HeaderPrincipal names the user (the gateway's authenticated subject).
	HeaderPrincipal = "Atoll-Principal"
	// HeaderPlatformAdmin is "true" when that user is a platform admin.
	HeaderPlatformAdmin = "Atoll-Platform-Admin"
)

// RequestWithHeader is Request with headers on the request message.
func (r *Requester) RequestWithHeader(ctx context.Context, target, subject string, data []byte, hdr nats.Header) ([]byte, error) {
	var last error
	delay := r.policy.BaseDelay
	for attempt := 1; attempt <= r.policy.Attempts; attempt++ {
		msg, err := r.breakers.Execute(target, func() (*nats.Msg, error) { return r.once(ctx, subject, data, hdr) })
		if err == nil {
			return msg.Data, nil
		}
		last = err
		if IsOpen(err) || !IsTargetFailure(err) || attempt == r.policy.Attempts {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("request %s: %w", subject, ctx.Err())
		case <-time.After(Jitter(delay, 0.5)):
		}
		delay *= 2
	}
	if errors.Is(last, gobreaker.ErrOpenState) {
		return nil, fmt.Errorf("request %s: breaker for %s open: %w", subject, target, last)
	}
	return nil, fmt.Errorf("request %s: %w", subject, last)
}

func (r *Requester) once(ctx context.Context, subject string, data []byte, hdr nats.Header) (*nats.Msg, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", errCallerDone, ctx.Err())
	}
	actx, cancel := context.WithTimeout(ctx, r.policy.Timeout)
	defer cancel()
	msg, err := r.nc.RequestMsgWithContext(actx, &nats.Msg{Subject: subject, Data: data, Header: hdr})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", errCallerDone, ctx.Err())
		}
		return nil, err
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		return nil, &RemoteError{Code: n, Description: msg.Header.Get(micro.ErrorHeader), Body: msg.Data}
	}
	return msg, nil
}
