package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Call describes one request/reply endpoint of the contract between the
// services: the service that serves it, its verb, who may call it, and
// the types of its request (Req) and reply (Resp). The descriptors are
// declared once, in contract.go; the server registers its endpoint with
// Endpoint and every caller calls it with Call, so a verb is written in
// one place and both sides agree on the payloads by type. Grants derives
// the request/reply permissions from them.
//
// A []byte Req is sent and received as it is (a document the server
// decodes and validates itself), and so is a []byte or json.RawMessage
// Resp; any other type travels as JSON.
type Call[Req, Resp any] struct {
	// Service is the serving service and its NATS user; the endpoint's
	// subject is RequestSubject(Service, Verb).
	Service string
	// Verb names the endpoint within its service.
	Verb string
	// Callers are the NATS users that may call the endpoint: the only
	// ones granted its subject (Grants), and the only ones it answers
	// (Bus.OnlyFrom). UserAdmin needs no grant but is listed when the
	// endpoint answers it.
	Callers []string
}

// Subject is the endpoint's request subject.
func (c Call[Req, Resp]) Subject() string { return RequestSubject(c.Service, c.Verb) }

// Endpoint returns the endpoint served by fn for Bus.Serve (whose
// ServeConfig.Name must be c.Service), answering c.Callers only; each
// request's context ends after timeout (or when the service stops).
func (c Call[Req, Resp]) Endpoint(timeout time.Duration, fn func(ctx context.Context, req Req, r micro.Request) (Resp, error)) EndpointSpec {
	spec := Endpoint(c.Verb, timeout, func(ctx context.Context, req Req, r micro.Request) (any, error) {
		resp, err := fn(ctx, req, r)
		if err != nil {
			return nil, err
		}
		if raw, ok := any(resp).([]byte); ok {
			return json.RawMessage(raw), nil
		}
		return resp, nil
	})
	spec.service = c.Service
	spec.callers = slices.Clone(c.Callers)
	return spec
}

// Call sends req to the endpoint through r (c.Service's breaker, r's
// retries and timeouts) and decodes the reply. Its errors are r's: a
// *RemoteError when the service refused, ErrBadReply when the reply does
// not decode as Resp.
func (c Call[Req, Resp]) Call(ctx context.Context, r *Requester, req Req) (Resp, error) {
	return c.CallWithHeader(ctx, r, nil, req)
}

// Send is Call for a caller that needs only to know the call succeeded:
// the reply is not decoded.
func (c Call[Req, Resp]) Send(ctx context.Context, r *Requester, req Req) error {
	return c.SendWithHeader(ctx, r, nil, req)
}

// SendWithHeader is Send with headers on the request.
func (c Call[Req, Resp]) SendWithHeader(ctx context.Context, r *Requester, hdr nats.Header, req Req) error {
	_, err := c.request(ctx, r, hdr, req)
	return err
}

// request sends req and returns the reply's body.
func (c Call[Req, Resp]) request(ctx context.Context, r *Requester, hdr nats.Header, req Req) ([]byte, error) {
	body, err := encodeRequest(req)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", c.Subject(), err)
	}
	return r.RequestWithHeader(ctx, c.Service, c.Subject(), body, hdr)
}

// CallWithHeader is Call with headers on the request (the identity of the
// user a caller acts for, see HeaderPrincipal).
func (c Call[Req, Resp]) CallWithHeader(ctx context.Context, r *Requester, hdr nats.Header, req Req) (Resp, error) {
	var resp Resp
	out, err := c.request(ctx, r, hdr, req)
	if err != nil {
		return resp, err
	}
	switch p := any(&resp).(type) {
	case *[]byte:
		*p = out
	case *json.RawMessage:
		*p = out
	default:
		if err := json.Unmarshal(out, &resp); err != nil {
			return resp, fmt.Errorf("%w: %s: %w", ErrBadReply, c.Subject(), err)
		}
	}
	return resp, nil
}

// ErrBadReply marks a reply that does not decode as its endpoint's reply
// type: the service answered, but not as the contract says.
var ErrBadReply = errors.New("undecodable reply")

func encodeRequest(req any) ([]byte, error) {
	switch v := req.(type) {
	case []byte:
		return v, nil
	case json.RawMessage:
		return v, nil
	}
	return json.Marshal(req)
}

// Descriptor is any endpoint of the contract, whatever its payload types.
type Descriptor interface {
	// Subject is the endpoint's request subject.
	Subject() string
	route() route
}

// route is what Grants needs of an endpoint.
type route struct {
	service, verb string
	callers       []string
}

func (c Call[Req, Resp]) route() route { return route{c.Service, c.Verb, c.Callers} }
