// Package sdk is the Go client of Atoll's Compute API.
//
// A Client holds the typed client generated from the contract
// (libs/computeapi) in its API field, so every endpoint is available with
// typed parameters and responses, and adds what a program needs around it:
// bearer authentication, retries with full-jitter exponential backoff that
// honour Retry-After and retry only what is safe to retry, hooks for
// logging and metrics, convenience methods that return typed results and a
// typed *Error, and the streaming endpoints (events over Server-Sent
// Events, logs as NDJSON, exec over a WebSocket).
//
// Retries are hashicorp/go-retryablehttp's, with the SDK's rules in its
// CheckRetry. What it cannot express stays here: the wait is chosen in
// CheckRetry, since Backoff cannot give the caller the answer when the wait
// would exceed MaxRetryAfter or outlast the context (nor see the request
// after a transport error); Retry-After is parsed here, since its parser is
// unexported; a RoundTripper bounds each attempt, since the library sends
// every attempt with the caller's context. Event streams are parsed by
// tmaxmax/go-sse's Read, with a small tap for the retry field that Read
// drops; WatchEvents reconnects by itself, since go-sse's Connection can
// neither move the after parameter nor stop on the callback's error.
//
//	c, err := sdk.New("https://atoll.example.com", sdk.WithToken(token))
//	w, created, err := c.Apply(ctx, "demo", yamlDoc)
//	var apiErr *sdk.Error
//	if errors.As(err, &apiErr) && apiErr.Status == http.StatusForbidden { ... }
package sdk

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"atoll.dev/libs/computeapi"
)

// DefaultUserAgent is sent when WithUserAgent is not given.
const DefaultUserAgent = "atoll-sdk-go/1"

// Hooks observe every HTTP attempt the client makes, for logging and
// metrics. Either may be nil. They run on the caller's goroutine.
type Hooks struct {
	// OnRequest is called before each attempt, with the request as sent.
	OnRequest func(req *http.Request)
	// OnResponse is called after each attempt with its outcome: a response
	// or a transport error, how long the attempt took to get response
	// headers, and the attempt's number (1 for the first).
	OnResponse func(req *http.Request, resp *http.Response, err error, elapsed time.Duration, attempt int)
}

// RetryPolicy says how often and how long to retry. See WithRetry.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts in all, the first included
	// (1 disables retries).
	MaxAttempts int
	// Base is the backoff before the second attempt; it doubles per attempt.
	Base time.Duration
	// Cap bounds the backoff (not a server's Retry-After).
	Cap time.Duration
}

// DefaultRetry is the policy of a client built without WithRetry.
var DefaultRetry = RetryPolicy{MaxAttempts: 4, Base: 200 * time.Millisecond, Cap: 5 * time.Second}

// Client talks to one Atoll gateway.
type Client struct {
	// API is the typed client generated from the contract; its requests go
	// through the same authentication, retries and hooks as the
	// convenience methods.
	API *computeapi.ClientWithResponses

	server    string
	token     string
	userAgent string
	httpc     *http.Client
	doer      *retryDoer
}

type settings struct {
	token     string
	roots     *x509.CertPool
	httpc     *http.Client
	timeout   time.Duration
	retry     RetryPolicy
	hooks     Hooks
	userAgent string
}

// Option configures a Client.
type Option func(*settings) error

// WithToken authenticates every request with a bearer token (an API token
// or a JWT).
func WithToken(token string) Option {
	return func(s *settings) error { s.token = token; return nil }
}

// WithHTTPClient sends requests with c instead of a client of its own. Its
// Timeout, if set, bounds whole streams too; prefer WithTimeout.
func WithHTTPClient(c *http.Client) Option {
	return func(s *settings) error {
		if c == nil {
			return errors.New("nil http client")
		}
		s.httpc = c
		return nil
	}
}

// WithRootCAs trusts the certificate authorities in pool, and only
// them, for an https server: a region whose certificate a private CA
// signed (atoll-dev's, made in its state directory). It applies to the
// client's own transport; with WithHTTPClient, configure that client.
func WithRootCAs(pool *x509.CertPool) Option {
	return func(s *settings) error {
		if pool == nil {
			return errors.New("nil certificate pool")
		}
		s.roots = pool
		return nil
	}
}

// WithTimeout bounds each attempt: until the whole response is read for
// ordinary calls, until the response headers for streams (logs, events,
// exec). Zero means no bound beyond the caller's context.
func WithTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return fmt.Errorf("negative timeout %v", d)
		}
		s.timeout = d
		return nil
	}
}

// WithRetry sets the number of attempts in all (1 disables retries), the
// backoff before the second attempt, and the bound of the backoff.
func WithRetry(maxAttempts int, base, bound time.Duration) Option {
	return func(s *settings) error {
		if maxAttempts < 1 || base < 0 || bound < base {
			return fmt.Errorf("retry: want maxAttempts >= 1 and 0 <= base <= cap, got %d, %v, %v", maxAttempts, base, bound)
		}
		s.retry = RetryPolicy{MaxAttempts: maxAttempts, Base: base, Cap: bound}
		return nil
	}
}

// WithHooks observes every attempt.
func WithHooks(h Hooks) Option {
	return func(s *settings) error { s.hooks = h; return nil }
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option {
	return func(s *settings) error { s.userAgent = ua; return nil }
}

// New returns a client of the gateway at server (an http or https URL,
// possibly with a path prefix).
func New(server string, opts ...Option) (*Client, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("server %q: %w", server, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server %q: want an http:// or https:// URL", server)
	}
	s := settings{retry: DefaultRetry, userAgent: DefaultUserAgent}
	for _, o := range opts {
		if err := o(&s); err != nil {
			return nil, err
		}
	}
	if s.httpc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		if s.roots != nil {
			t.TLSClientConfig = &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}
		}
		s.httpc = &http.Client{Transport: t}
	} else if s.roots != nil {
		return nil, errors.New("WithRootCAs and WithHTTPClient: set the roots on the given client")
	}
	c := &Client{
		server:    strings.TrimSuffix(server, "/") + "/",
		token:     s.token,
		userAgent: s.userAgent,
		httpc:     s.httpc,
	}
	c.doer = newRetryDoer(s.httpc, s.retry, s.hooks, s.timeout)
	c.API, err = computeapi.NewClientWithResponses(c.server,
		computeapi.WithHTTPClient(c.doer),
		computeapi.WithRequestEditorFn(c.authorize))
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", server, err)
	}
	return c, nil
}

// Server is the gateway's URL, ending in a slash.
func (c *Client) Server() string { return c.server }

// authorize sets the headers every request carries.
func (c *Client) authorize(_ context.Context, req *http.Request) error {
	c.setHeaders(req.Header)
	dropUnset(req)
	return nil
}

// unsetQuery are the optional query parameters whose zero value means
// "not given". The generated client sends every optional parameter, zero
// or not (its parameters are plain values, not pointers); dropUnset keeps
// the zero ones off the wire, where they could break a bound such as
// limit's minimum of 1.
var unsetQuery = map[string]string{
	"kind": "", "label": "", "phase": "", "continue": "", "container": "", "pod": "",
	"limit": "0", "after": "0", "sinceSeconds": "0", "tail": "0",
	"watch": "false", "follow": "false", "tty": "false", "stdin": "false",
}

// dropUnset removes unset optional query parameters and empty optional headers.
func dropUnset(req *http.Request) {
	for _, h := range []string{"Idempotency-Key", "Last-Event-ID"} {
		if v, ok := req.Header[http.CanonicalHeaderKey(h)]; ok && (len(v) == 0 || v[0] == "") {
			req.Header.Del(h)
		}
	}
	if req.URL.RawQuery == "" {
		return
	}
	parts := strings.Split(req.URL.RawQuery, "&")
	kept := parts[:0]
	for _, p := range parts {
		k, v, _ := strings.Cut(p, "=")
		if zero, ok := unsetQuery[k]; p == "" || (ok && v == zero) {
			continue
		}
		kept = append(kept, p)
	}
	req.URL.RawQuery = strings.Join(kept, "&")
}

func (c *Client) setHeaders(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	if c.userAgent != "" {
		h.Set("User-Agent", c.userAgent)
	}
}

// accept returns an editor that sets the Accept header.
func accept(mediaType string) computeapi.RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Accept", mediaType)
		return nil
	}
}
