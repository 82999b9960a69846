package bus

import (
	"encoding/json"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go/micro"
)

// RespondJSON replies to a micro request with v as JSON.
func RespondJSON(r micro.Request, v any) error {
	return r.RespondJSON(v)
}

// RespondError replies with an error code (HTTP-like: 4xx the caller's
// fault, 5xx the service's), a description and body as JSON.
func RespondError(r micro.Request, code int, description string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		b = nil
	}
	return r.Error(strconv.Itoa(code), description, b)
}

// Concurrent runs a micro handler on up to n requests at once, each in a
// goroutine of wg, so that the caller's Stop can wait for the requests in
// flight (after the endpoint is stopped, wg.Wait). micro calls an
// endpoint's handler for one request at a time, so a handler that waits
// on other services would otherwise queue every caller behind the
// slowest. Bus.Serve does this, and the rest of the prologue, for the
// request/reply endpoints; Concurrent is for handlers that answer in
// their own way (the debug sessions of libs/debugstream).
func Concurrent(n int, wg *sync.WaitGroup, h micro.HandlerFunc) micro.HandlerFunc {
	sem := make(chan struct{}, n)
	return func(r micro.Request) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			h(r)
		})
	}
}
