package gateway_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway"
)

// TestQuotaShowsWhatPreemptibleBorrows: the Preemptible row of a
// project's quota carries its usage as the borrowed figure, reclaimable;
// the other tiers borrow nothing.
func TestQuotaShowsWhatPreemptibleBorrows(t *testing.T) {
	g := newTestGateway(t, gateway.Config{})
	ctx := context.Background()
	kv, err := g.Bus.KV(ctx, bus.BucketQuota)
	require.NoError(t, err)
	l := api.Ledger{Project: "lend", Usage: map[api.Tier]api.Demand{
		api.TierReserved:    {MilliCPU: 4000, Pods: 2},
		api.TierPreemptible: {MilliCPU: 6000, MemoryBytes: 3 << 30, GPUs: 1, Pods: 3},
	}, Reservations: 5}
	doc, _ := json.Marshal(l)
	_, err = kv.Put(ctx, api.QuotaProjectKey("lend"), doc)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, body := g.do(c, "GET", "/v1/projects/lend/quota", g.Admin, nil)
		require.Equal(c, 200, resp.StatusCode, "GET quota: %s", body)
		var got computeapi.Quota
		require.NoError(c, json.Unmarshal(body, &got))
		require.Len(c, got.Tiers, 3)
		for _, tq := range got.Tiers {
			switch tq.Tier {
			case "Preemptible":
				assert.Equal(c, computeapi.Resources{MilliCPU: 6000, MemoryBytes: 3 << 30, Gpus: 1, Pods: 3}, tq.Borrowed)
				assert.True(c, tq.Reclaimable)
			default:
				assert.Zero(c, tq.Borrowed, tq.Tier)
				assert.False(c, tq.Reclaimable, tq.Tier)
			}
		}
	}, 5*time.Second, 20*time.Millisecond)
}

// TestStatusShowsTheQueue: a pending workload's tier queue, position,
// decision time and preemptor reach the Compute API's status.
func TestStatusShowsTheQueue(t *testing.T) {
	g := newTestGateway(t, gateway.Config{})
	ctx := context.Background()
	at := time.Date(2026, 11, 22, 23, 50, 0, 0, time.UTC)
	w, st := benchApp("p", 1)
	w.Metadata.Name, st.Key = "waits", "p.app.waits"
	st.Phase = api.PhaseUnscheduled
	st.Queue, st.Position, st.PreemptedBy, st.QueuedAt = "Preemptible", 4, "p.app.urgent", at
	for _, kv := range []struct {
		bucket, key string
		v           any
	}{{bus.BucketStatus, st.Key, st}, {bus.BucketWorkloads, w.Key(), w}} {
		b, err := g.Bus.KV(ctx, kv.bucket)
		require.NoError(t, err)
		doc, _ := json.Marshal(kv.v)
		_, err = b.Put(ctx, kv.key, doc)
		require.NoError(t, err)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, body := g.do(c, "GET", "/v1/projects/p/workloads/app/waits", g.Admin, nil)
		require.Equal(c, 200, resp.StatusCode, "GET workload: %s", body)
		var got computeapi.Workload
		require.NoError(c, json.Unmarshal(body, &got))
		assert.Equal(c, "Preemptible", got.Status.Queue)
		assert.Equal(c, 4, got.Status.Position)
		assert.Equal(c, "p.app.urgent", got.Status.PreemptedBy)
		assert.True(c, at.Equal(got.Status.QueuedAt), "queuedAt %s", got.Status.QueuedAt)
	}, 5*time.Second, 20*time.Millisecond)
}
