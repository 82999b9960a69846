package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
)

// This file is the one prologue of every micro endpoint. A service
// registers its endpoints with Bus.Serve, each made from its descriptor in
// the contract (contract.go) and a function of the decoded request:
//
//	eps, err := b.Serve(ctx, bus.ServeConfig{Name: bus.UserAdmission, Metrics: m, Logger: log},
//		bus.AdmissionOperate.Endpoint(15*time.Second, s.operate), ...)
//	...
//	func (s *Service) operate(ctx context.Context, op api.Operation, r micro.Request) (*api.Workload, error)
//
// and the prologue does the rest the same way everywhere: it decodes the
// request strictly (a malformed one gets 400 naming the problem in JSON
// terms, never a Go type), gives the function a context that ends with
// the endpoint's timeout or when the service stops, answers its result as
// JSON or its error as a status and an api.ErrorBody (an *Error as it
// says, a context that ended as 503, anything else as 500), and records
// the request's latency and error code (Metrics).

// Error is a refusal: an endpoint function returns it to answer with
// Status and Body.
type Error struct {
	// Status is HTTP-like: 4xx the caller's fault, 5xx the service's.
	Status int
	// Body is the error document the caller receives.
	Body api.ErrorBody
}

func (e *Error) Error() string { return e.Body.Message }

// Errorf returns an *Error with status, a machine-readable code and a
// formatted message.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Body: api.ErrorBody{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// EndpointFunc is an endpoint's logic: it gets the decoded request (a
// []byte Req gets the body as it came) and the raw request for its
// headers, and returns the reply to send as JSON, or an error.
type EndpointFunc[Req any] func(ctx context.Context, req Req, r micro.Request) (any, error)

// EndpointSpec is one endpoint for Bus.Serve; Endpoint makes it.
type EndpointSpec struct {
	service string // the descriptor's service (Call.Endpoint); "" for Endpoint's
	verb    string
	timeout time.Duration
	serve   func(ctx context.Context, r micro.Request) (any, error)
	callers []string // From's users; none: ServeConfig.Callers
}

// From returns s answering only requests from users (Bus.OnlyFrom), in
// place of ServeConfig.Callers: for a service whose endpoints trust
// different callers.
func (s EndpointSpec) From(users ...string) EndpointSpec {
	s.callers = users
	return s
}

// Endpoint returns the endpoint verb, served by fn, at
// RequestSubject(service, verb); each request's context ends after
// timeout (or when the service stops). The services' endpoints are made
// by their descriptors instead (Call.Endpoint), which build on this;
// Endpoint alone is for endpoints outside the contract (tests).
func Endpoint[Req any](verb string, timeout time.Duration, fn EndpointFunc[Req]) EndpointSpec {
	return EndpointSpec{verb: verb, timeout: timeout, serve: func(ctx context.Context, r micro.Request) (any, error) {
		var req Req
		if raw, ok := any(&req).(*[]byte); ok {
			*raw = r.Data()
		} else if err := DecodeRequest(r.Data(), &req); err != nil {
			return nil, err
		}
		return fn(ctx, req, r)
	}}
}

// DecodeRequest decodes a JSON request strictly: unknown fields and
// anything after the value are refused. Its error is a 400 *Error whose
// message names the problem in JSON terms (a field's path, the JSON type
// sent and the one wanted), never a Go type.
func DecodeRequest(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(api.StatusBadRequest, "BadRequest", "malformed request: %s", api.DescribeJSONError(err, v))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Errorf(api.StatusBadRequest, "BadRequest", "malformed request: data after the JSON value at offset %d", dec.InputOffset())
	}
	return nil
}

// ServeConfig describes a service's micro endpoints.
type ServeConfig struct {
	// Name is the service's name: the micro service is atoll-<Name>, and
	// an endpoint's subject is RequestSubject(Name, verb).
	Name string
	// Version is the micro service's version (default 0.1.0).
	Version string
	// Description is the micro service's description.
	Description string
	// Concurrency bounds the requests each endpoint handles at once
	// (default 64); micro alone would handle one at a time.
	Concurrency int
	// Callers, when set, are the only NATS users whose requests are
	// answered (Bus.OnlyFrom); others get 403. EndpointSpec.From sets
	// them per endpoint instead.
	Callers []string
	// Metrics records each request (nil: none).
	Metrics *Metrics
	// Logger receives failures; slog.Default() when nil.
	Logger *slog.Logger
}

// Endpoints are a service's running micro endpoints.
type Endpoints struct {
	svc     micro.Service
	ctx     context.Context // the service's lifetime: ends with Stop or Serve's ctx
	cancel  context.CancelFunc
	metrics *Metrics
	log     *slog.Logger

	mu       sync.Mutex
	stopping bool // mu must be held
	inFlight sync.WaitGroup
}

// errStopping answers requests that arrive while the service stops; the
// caller's Requester retries them on another replica.
var errStopping = Errorf(api.StatusUnavailable, "Unavailable", "service stopping")

// Serve registers endpoints as the micro service cfg names. Every
// request's context derives from ctx, which should be the service's
// lifetime: it ends when ctx ends or Stop is called.
func (b *Bus) Serve(ctx context.Context, cfg ServeConfig, endpoints ...EndpointSpec) (*Endpoints, error) {
	if cfg.Version == "" {
		cfg.Version = "0.1.0"
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	svc, err := micro.AddService(b.NC, micro.Config{Name: "atoll-" + cfg.Name, Version: cfg.Version, Description: cfg.Description})
	if err != nil {
		return nil, fmt.Errorf("register %s service: %w", cfg.Name, err)
	}
	e := &Endpoints{svc: svc, metrics: cfg.Metrics, log: cfg.Logger}
	e.ctx, e.cancel = context.WithCancel(ctx)
	for _, spec := range endpoints {
		if spec.service != "" && spec.service != cfg.Name {
			_ = e.Stop()
			return nil, fmt.Errorf("register %s %s: the endpoint is %s's", cfg.Name, spec.verb, spec.service)
		}
		h := e.handler(spec, cfg.Concurrency)
		callers := spec.callers
		if len(callers) == 0 {
			callers = cfg.Callers
		}
		if len(callers) > 0 {
			h = b.OnlyFrom(h, callers...)
		}
		if err := svc.AddEndpoint(spec.verb, h, micro.WithEndpointSubject(RequestSubject(cfg.Name, spec.verb))); err != nil {
			_ = e.Stop()
			return nil, fmt.Errorf("register %s %s: %w", cfg.Name, spec.verb, err)
		}
	}
	// The endpoints' subscriptions reach the server asynchronously: a
	// caller on another connection asking right after Serve returned could
	// be told "no responders" (a test's first request was). Wait, briefly,
	// until the server has them; a connection that is down registers them
	// when it is back, as before.
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = b.NC.FlushWithContext(fctx)
	return e, nil
}

// Stop unregisters the endpoints, cancels the contexts of the requests in
// flight (their callers get 503 unless they finish first) and waits for
// their handlers to return.
func (e *Endpoints) Stop() error {
	err := e.svc.Stop()
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	e.cancel()
	e.inFlight.Wait()
	return err
}

// handler runs spec on up to n requests at once, each on its own goroutine.
func (e *Endpoints) handler(spec EndpointSpec, n int) micro.HandlerFunc {
	sem := make(chan struct{}, n)
	return func(r micro.Request) {
		start := time.Now()
		sem <- struct{}{}
		if !e.run(func() {
			defer func() { <-sem }()
			// No longer than the caller waits: a reply after that is
			// for no one.
			timeout := spec.timeout
			if d, ok := callerTimeout(r); ok {
				timeout = min(timeout, d)
			}
			ctx, cancel := context.WithDeadline(e.ctx, start.Add(timeout))
			defer cancel()
			v, err := spec.serve(ctx, r)
			e.reply(r, spec, start, v, err)
		}) {
			<-sem
			// Delivered by the subscription's drain after Stop.
			e.reply(r, spec, start, nil, errStopping)
		}
	}
}

// run starts fn as a request in flight, which Stop waits for; false, and
// fn not run, once the endpoints stop.
func (e *Endpoints) run(fn func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		return false
	}
	e.inFlight.Go(fn)
	return true
}

// reply answers r with v or err and records the request.
func (e *Endpoints) reply(r micro.Request, spec EndpointSpec, start time.Time, v any, err error) {
	if err == nil {
		err = r.RespondJSON(v)
		if err == nil || !errors.Is(err, micro.ErrMarshalResponse) {
			if err != nil {
				e.log.Warn("reply", "endpoint", spec.verb, "err", err)
			}
			e.metrics.endpointDone(spec.verb, statusOK, time.Since(start).Seconds())
			return
		}
	}
	var be *Error
	switch {
	case errors.As(err, &be):
	case e.ctx.Err() != nil:
		be = errStopping
	case errors.Is(err, context.DeadlineExceeded):
		be = Errorf(api.StatusUnavailable, "Timeout", "%s did not finish in time (at most %s, or as long as its caller waits): %v", spec.verb, spec.timeout, err)
	default:
		e.log.Error("request failed", "endpoint", spec.verb, "err", err)
		be = Errorf(api.StatusInternal, "Internal", "%v", err)
	}
	if rerr := RespondError(r, be.Status, be.Body.Message, be.Body); rerr != nil {
		e.log.Warn("reply", "endpoint", spec.verb, "err", rerr)
	}
	e.metrics.endpointDone(spec.verb, be.Status, time.Since(start).Seconds())
}

// statusOK is the code recorded for a successful reply.
const statusOK = 200
