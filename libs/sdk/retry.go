package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"
)

// MaxRetryAfter is the longest Retry-After the client waits for; a server
// that asks for longer gets its answer returned to the caller at once.
const MaxRetryAfter = time.Minute

// ErrAttemptTimeout is the transport error of an attempt that outlived
// WithTimeout; such an attempt is retried when retrying is safe.
var ErrAttemptTimeout = errors.New("attempt timed out")

type ctxKey int

const (
	streamKey ctxKey = iota
	repeatableKey
)

// repeatable marks a request whose repetition is harmless (a POST that sets
// an absolute state) as safe to retry, like a PUT.
func repeatable(ctx context.Context) context.Context {
	return context.WithValue(ctx, repeatableKey, true)
}

// streaming marks requests whose bodies are streams: the per-attempt
// timeout then bounds only the wait for response headers.
func streaming(ctx context.Context) context.Context {
	return context.WithValue(ctx, streamKey, true)
}

func isStreaming(ctx context.Context) bool {
	v, _ := ctx.Value(streamKey).(bool)
	return v
}

// retryDoer is the computeapi.HttpRequestDoer of a Client: it retries what
// is safe to retry, with full-jitter exponential backoff, and reports
// every attempt to the hooks.
type retryDoer struct {
	next    *http.Client
	policy  RetryPolicy
	hooks   Hooks
	timeout time.Duration
}

// Do sends req, retrying on 429 always, on 500/502/503/504 and transport
// errors when req is safe to repeat (GET, HEAD, PUT, DELETE, OPTIONS, or
// an Idempotency-Key header), honouring Retry-After on 429 and 503. The
// caller's context stops it at once.
func (d *retryDoer) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	safe := idempotent(req)
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	for attempt := 1; ; attempt++ {
		r := req
		if attempt > 1 {
			var err error
			if r, err = rewind(req); err != nil {
				return nil, err
			}
		}
		resp, err := d.attempt(r, attempt)
		if attempt >= d.policy.MaxAttempts || !replayable || ctx.Err() != nil || !retryable(resp, err, safe) {
			normalizeRetryAfter(resp)
			return resp, err
		}
		wait := backoff(d.policy, attempt)
		if ra, ok := retryAfter(resp); ok {
			if ra > MaxRetryAfter {
				normalizeRetryAfter(resp)
				return resp, err
			}
			wait = ra
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			// No time left to wait: the caller gets this answer now.
			normalizeRetryAfter(resp)
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// attempt sends one request within the per-attempt timeout.
func (d *retryDoer) attempt(r *http.Request, n int) (*http.Response, error) {
	var (
		cancel  context.CancelFunc
		expired = func() bool { return false }
		parent  = r.Context()
		stream  = isStreaming(parent)
		headers *time.Timer
	)
	if d.timeout > 0 {
		var actx context.Context
		if stream {
			// Bound only the wait for headers: the stream itself lasts.
			actx, cancel = context.WithCancel(r.Context())
			fired := make(chan struct{})
			headers = time.AfterFunc(d.timeout, func() { close(fired); cancel() })
			expired = func() bool {
				select {
				case <-fired:
					return true
				default:
					return false
				}
			}
		} else {
			actx, cancel = context.WithTimeout(r.Context(), d.timeout)
			expired = func() bool { return errors.Is(actx.Err(), context.DeadlineExceeded) }
		}
		r = r.WithContext(actx)
	}
	if d.hooks.OnRequest != nil {
		d.hooks.OnRequest(r)
	}
	start := time.Now()
	resp, err := d.next.Do(r)
	if d.hooks.OnResponse != nil {
		d.hooks.OnResponse(r, resp, err, time.Since(start), n)
	}
	if cancel == nil {
		return resp, err
	}
	if headers != nil {
		headers.Stop()
	}
	if err != nil {
		timedOut := expired()
		cancel()
		if timedOut && parent.Err() == nil {
			return nil, fmt.Errorf("%s %s: %w after %v", r.Method, r.URL.Redacted(), ErrAttemptTimeout, d.timeout)
		}
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelBody releases an attempt's context when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// idempotent says whether repeating req cannot do harm.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	}
	if v, _ := req.Context().Value(repeatableKey).(bool); v {
		return true
	}
	return req.Header.Get("Idempotency-Key") != ""
}

// retryable says whether an attempt's outcome is worth another attempt.
func retryable(resp *http.Response, err error, safe bool) bool {
	if err != nil {
		// A request that never reached the server is safe to send again.
		return safe || neverSent(err)
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		// The gateway refused it before doing anything.
		return true
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return safe
	}
	return false
}

// neverSent says whether a transport error happened before the request
// could have reached the server (the connection was never made).
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// rewind copies req with a fresh body for another attempt.
func rewind(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return r, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("replay request body: %w", err)
	}
	r.Body = body
	return r, nil
}

// backoff is the full-jitter wait after the given attempt: uniform in
// [0, min(cap, base * 2^(attempt-1))].
func backoff(p RetryPolicy, attempt int) time.Duration {
	ceil := p.Base
	for i := 1; i < attempt && ceil < p.Cap; i++ {
		ceil *= 2
	}
	ceil = min(ceil, p.Cap)
	if ceil <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

// retryAfter reads Retry-After (seconds or an HTTP date) of a 429 or 503.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp == nil || (resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable) {
		return 0, false
	}
	return parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
}

func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(s) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// normalizeRetryAfter rewrites an HTTP-date Retry-After as seconds, the
// form the contract declares (and the generated parsers bind as an integer).
func normalizeRetryAfter(resp *http.Response) {
	if resp == nil {
		return
	}
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return
	}
	if _, err := strconv.ParseInt(v, 10, 64); err == nil {
		return
	}
	if d, ok := parseRetryAfter(v, time.Now()); ok {
		resp.Header.Set("Retry-After", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
		return
	}
	resp.Header.Del("Retry-After")
}
