package upgrade

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"

	"atoll.dev/libs/api"
)

// TestGateViewProjections: the gate's view keeps, of a status, the counts
// of the clusters where the workload wants pods, and of a workload, an
// App's budget (the default when it sets none) or that it is no App.
func TestGateViewProjections(t *testing.T) {
	shares, err := decodeShares([]byte(`{"phase":"Running","clusters":{"zone-a":{"desired":3,"ready":2,"running":3},"zone-b":{"desired":0,"ready":0,"running":0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]shareCounts{"zone-a": {Desired: 3, Ready: 2}}, shares); diff != "" {
		t.Errorf("shares (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		name, doc string
		want      appBudget
	}{
		{"App with a budget", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"a"},"spec":{"replicas":3,"availability":{"minAvailable":"2"},"template":{"containers":[{"name":"c","image":"i"}]}}}`,
			appBudget{App: true, Kind: "minAvailable", Value: "2"}},
		{"App without one", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"a"},"spec":{"replicas":3,"template":{"containers":[{"name":"c","image":"i"}]}}}`,
			appBudget{App: true, Kind: "maxUnavailable", Value: api.DefaultMaxUnavailable}},
		{"a Config", `{"apiVersion":"atoll.dev/v1","kind":"Config","metadata":{"project":"p","name":"c"},"spec":{"data":{"k":"v"}}}`,
			appBudget{}},
	} {
		got, err := decodeBudget([]byte(c.doc))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestGateViewFollowsTheBuckets: the view a plan's gate reads holds what
// the status and workloads buckets hold once it is ready, follows their
// changes, and stops.
func TestGateViewFollowsTheBuckets(t *testing.T) {
	ctx := context.Background()
	b := openBus(t)
	put := func(bucket, key, doc string) {
		t.Helper()
		kv, err := b.KV(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, []byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	const key = "p.app.web"
	put(bus.BucketWorkloads, key, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"web"},"spec":{"replicas":3,"availability":{"minAvailable":"2"},"template":{"containers":[{"name":"c","image":"i"}]}}}`)
	put(bus.BucketStatus, key, `{"key":"p.app.web","clusters":{"zone-a":{"desired":3,"ready":3}}}`)
	s := &Service{bus: b, log: slog.New(slog.DiscardHandler)}
	v, err := s.view(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := v.budgets.Get(key); !ok || e.Value != (appBudget{App: true, Kind: "minAvailable", Value: "2"}) {
		t.Errorf("budget %+v, %v", e.Value, ok)
	}
	put(bus.BucketStatus, key, `{"key":"p.app.web","clusters":{"zone-a":{"desired":3,"ready":1}}}`)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		e, ok := v.shares.Get(key)
		assert.True(ct, ok)
		assert.Equal(ct, shareCounts{Desired: 3, Ready: 1}, e.Value["zone-a"])
	}, 10*time.Second, 10*time.Millisecond)
	s.stopView()
	if s.gv != nil {
		t.Error("the view is still set after stopView")
	}
}
