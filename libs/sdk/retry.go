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

	"github.com/hashicorp/go-retryablehttp"
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

// retryDoer is the computeapi.HttpRequestDoer of a Client: a
// go-retryablehttp client configured with the SDK's rules.
type retryDoer struct {
	httpc   *http.Client // sends one attempt, bounded by timeout
	policy  RetryPolicy
	hooks   Hooks
	timeout time.Duration
}

// newRetryDoer sends attempts with httpc, each bounded by timeout if it is
// positive.
func newRetryDoer(httpc *http.Client, policy RetryPolicy, hooks Hooks, timeout time.Duration) *retryDoer {
	if timeout > 0 {
		next := httpc.Transport
		if next == nil {
			next = http.DefaultTransport
		}
		attempt := *httpc
		attempt.Transport = &attemptTransport{next: next, timeout: timeout}
		httpc = &attempt
	}
	return &retryDoer{httpc: httpc, policy: policy, hooks: hooks, timeout: timeout}
}

// Do sends req, retrying on 429 always, on 500/502/503/504 and transport
// errors when req is safe to repeat (GET, HEAD, PUT, DELETE, OPTIONS, or
// an Idempotency-Key header), honouring Retry-After on 429 and 503. The
// caller's context stops it at once.
//
// Each call gets a retryablehttp.Client of its own, whose callbacks share
// the call's state: its Backoff is not told the request when an attempt
// failed without a response.
func (d *retryDoer) Do(req *http.Request) (*http.Response, error) {
	rreq, err := retryablehttp.FromRequest(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read request body: %w", req.Method, req.URL.Redacted(), err)
	}
	a := &call{doer: d, safe: idempotent(req)}
	rc := &retryablehttp.Client{
		HTTPClient:     d.httpc,
		RetryMax:       d.policy.MaxAttempts - 1,
		RequestLogHook: a.sending,
		CheckRetry:     a.checkRetry,
		Backoff:        a.backoff,
		// The last attempt's answer or error, as it is.
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
	}
	resp, err := rc.Do(rreq)
	normalizeRetryAfter(resp)
	return resp, err
}

// call is one Do's state across its attempts.
type call struct {
	doer    *retryDoer
	safe    bool          // repeating the request cannot do harm
	attempt int           // the attempt under way, from 1
	req     *http.Request // as sent in that attempt
	start   time.Time     // when that attempt started
	wait    time.Duration // the wait before the next attempt, chosen by checkRetry
}

// sending is the RequestLogHook, called before each attempt.
func (a *call) sending(_ retryablehttp.Logger, req *http.Request, retry int) {
	a.attempt, a.req, a.start = retry+1, req, time.Now()
	if a.doer.hooks.OnRequest != nil {
		a.doer.hooks.OnRequest(req)
	}
}

// checkRetry is the CheckRetry, called after each attempt. It reports the
// attempt to OnResponse (the ResponseLogHook misses transport errors) and
// chooses the wait itself: only here can the caller still get this answer
// when the wait would exceed MaxRetryAfter or outlast its context.
func (a *call) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if a.doer.hooks.OnResponse != nil {
		a.doer.hooks.OnResponse(a.req, resp, err, time.Since(a.start), a.attempt)
	}
	if ctx.Err() != nil || !retryable(resp, err, a.safe) {
		return false, nil
	}
	if err != nil {
		// The library knows the transport errors that another attempt
		// cannot cure: a bad certificate, scheme or header, a redirect loop.
		if again, _ := retryablehttp.DefaultRetryPolicy(ctx, nil, err); !again {
			return false, nil
		}
	}
	a.wait = backoff(a.doer.policy, a.attempt)
	if ra, ok := retryAfter(resp); ok {
		if ra > MaxRetryAfter {
			return false, nil
		}
		a.wait = ra
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < a.wait {
		return false, nil // no time left to wait: the caller gets this answer now
	}
	return true, nil
}

// backoff is the Backoff: the wait checkRetry chose.
func (a *call) backoff(_, _ time.Duration, _ int, _ *http.Response) time.Duration {
	return a.wait
}

// attemptTransport bounds each attempt by timeout: the whole exchange, or
// for streaming requests only the wait for response headers.
type attemptTransport struct {
	next    http.RoundTripper
	timeout time.Duration
}

func (t *attemptTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(r.Context())
	timer := time.AfterFunc(t.timeout, func() { cancel(ErrAttemptTimeout) })
	resp, err := t.next.RoundTrip(r.WithContext(ctx))
	if err != nil {
		timer.Stop()
		cancel(nil)
		if errors.Is(context.Cause(ctx), ErrAttemptTimeout) {
			return nil, fmt.Errorf("%w after %v", ErrAttemptTimeout, t.timeout)
		}
		return nil, err
	}
	if isStreaming(ctx) {
		timer.Stop() // the stream itself lasts
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: func() { timer.Stop(); cancel(nil) }}
	return resp, nil
}

// cancelBody releases an attempt's context when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel func()
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
