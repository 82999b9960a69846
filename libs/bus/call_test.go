package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// receipt is a typed reply.
type receipt struct {
	Item  string `json:"item"`
	Total int    `json:"total"`
}

var (
	placeOrder = bus.Call[order, receipt]{Service: "orders", Verb: "place"}
	// echoRaw takes and answers raw bytes.
	echoRaw = bus.Call[[]byte, []byte]{Service: "orders", Verb: "echo"}
	// placeBadly answers what does not decode as a receipt.
	placeBadly = bus.Call[order, receipt]{Service: "orders", Verb: "badly"}
)

func TestCallServedAndCalledThroughItsDescriptor(t *testing.T) {
	b := openBus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eps, err := b.Serve(ctx, bus.ServeConfig{Name: "orders", Logger: quiet},
		placeOrder.Endpoint(time.Second, func(_ context.Context, o order, _ micro.Request) (receipt, error) {
			if o.Item == "conflict" {
				return receipt{}, bus.Errorf(api.StatusConflict, "Conflict", "item %s is taken", o.Item)
			}
			return receipt{Item: o.Item, Total: 3 * o.Quantity}, nil
		}),
		echoRaw.Endpoint(time.Second, func(_ context.Context, in []byte, _ micro.Request) ([]byte, error) { return in, nil }),
		bus.Endpoint(placeBadly.Verb, time.Second, func(context.Context, order, micro.Request) (any, error) { return []int{1}, nil }),
	)
	require.NoError(t, err)
	t.Cleanup(func() { _ = eps.Stop() })
	r := bus.NewRequester(b.NC, bus.RequestPolicy{Attempts: 1})

	got, err := placeOrder.Call(ctx, r, order{Item: "tea", Quantity: 2})
	require.NoError(t, err)
	assert.Equal(t, receipt{Item: "tea", Total: 6}, got)
	require.NoError(t, placeOrder.Send(ctx, r, order{Item: "tea"}))

	_, err = placeOrder.Call(ctx, r, order{Item: "conflict"})
	var re *bus.RemoteError
	require.ErrorAs(t, err, &re, "a refusal comes back as the Requester's RemoteError")
	assert.Equal(t, api.StatusConflict, re.Code)
	var eb api.ErrorBody
	require.NoError(t, json.Unmarshal(re.Body, &eb))
	assert.Equal(t, "Conflict", eb.Code)

	raw, err := echoRaw.Call(ctx, r, []byte(`{"as":"is"}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"as":"is"}`, string(raw), "raw bytes travel as they are")

	_, err = placeBadly.Call(ctx, r, order{Item: "tea"})
	assert.True(t, errors.Is(err, bus.ErrBadReply), "a reply not of the endpoint's type: %v", err)
	assert.False(t, bus.IsTargetFailure(err))
	assert.NoError(t, placeBadly.Send(ctx, r, order{Item: "tea"}), "Send does not decode the reply")
}

func TestServeRefusesAnotherServicesEndpoint(t *testing.T) {
	b := openBus(t)
	_, err := b.Serve(context.Background(), bus.ServeConfig{Name: "billing", Logger: quiet},
		placeOrder.Endpoint(time.Second, func(context.Context, order, micro.Request) (receipt, error) { return receipt{}, nil }))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "orders")
}
