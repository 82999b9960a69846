package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway"
)

// TestQuotaIsReadFromTheProjectLedgers: the gateway serves a project's
// quota from its ledger key and lists projects by their ledgers; the
// per-workload reservation keys beside them are neither read nor listed.
func TestQuotaIsReadFromTheProjectLedgers(t *testing.T) {
	g := newTestGateway(t, gateway.Config{})
	ctx := context.Background()
	kv, err := g.Bus.KV(ctx, bus.BucketQuota)
	if err != nil {
		t.Fatal(err)
	}
	// The region's defaults, as the quota service publishes them.
	def, _ := json.Marshal(api.QuotaDefaults{MaxWorkloads: 100, Limits: map[api.Tier]api.Limit{
		api.TierOnDemand:    {MilliCPU: new(int64(8000)), Pods: new(int64(50))},
		api.TierPreemptible: {GPUs: new(int64(2))},
	}})
	if _, err := kv.Put(ctx, api.QuotaDefaultsKey, def); err != nil {
		t.Fatal(err)
	}
	l := api.Ledger{Project: "team", Limits: map[api.Tier]api.Limit{api.TierOnDemand: {Pods: new(int64(10))}},
		Usage: map[api.Tier]api.Demand{api.TierOnDemand: {Tier: api.TierOnDemand, MilliCPU: 3000, Pods: 3}}, Reservations: 3}
	doc, _ := json.Marshal(l)
	if _, err := kv.Put(ctx, api.QuotaProjectKey("team"), doc); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		r, _ := json.Marshal(api.Reservation{Project: "team", Key: fmt.Sprintf("team.app.w%d", i), State: api.ReservationCommitted,
			Demand: api.Demand{Tier: api.TierOnDemand, MilliCPU: 1000, Pods: 1}})
		if _, err := kv.Put(ctx, api.QuotaReservationKey("team", fmt.Sprintf("team.app.w%d", i)), r); err != nil {
			t.Fatal(err)
		}
	}
	// Reserved: left out of the defaults, forbidden; OnDemand: the
	// project's pods over the default cpu; Preemptible: the default.
	want := computeapi.Quota{Project: "team", Workloads: 3, MaxWorkloads: 100, Tiers: []computeapi.TierQuota{
		{Tier: "Reserved", Default: true},
		{Tier: "OnDemand", Limit: computeapi.Resources{MilliCPU: 8000, Pods: 10}, Used: computeapi.Resources{MilliCPU: 3000, Pods: 3}},
		{Tier: "Preemptible", Default: true, Limit: computeapi.Resources{Gpus: 2}},
	}}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, body := g.do(c, "GET", "/v1/projects/team/quota", g.Admin, nil)
		require.Equal(c, 200, resp.StatusCode, "GET quota: %s", body)
		var got computeapi.Quota
		require.NoError(c, json.Unmarshal(body, &got), "GET quota")
		if diff := cmp.Diff(want, got); diff != "" {
			c.Errorf("quota (-want +got):\n%s", diff)
		}
	}, 5*time.Second, 20*time.Millisecond)
	// A mirror filtered as the gateway's holds the ledger only.
	m, err := g.Bus.MirrorFiltered(t.Context(), bus.BucketQuota, api.QuotaProjectFilter, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-m.Ready()
	if diff := cmp.Diff([]string{api.QuotaProjectKey("team")}, m.Keys()); diff != "" {
		t.Errorf("mirrored keys (-want +got):\n%s", diff)
	}
	resp, body := g.do(t, "GET", "/v1/projects", g.Admin, nil)
	var projects computeapi.ProjectList
	if resp.StatusCode != 200 || json.Unmarshal(body, &projects) != nil {
		t.Fatalf("projects: %d %s", resp.StatusCode, body)
	}
	if diff := cmp.Diff(computeapi.ProjectList{Items: []computeapi.Project{{Name: "team", Role: "platform-admin"}}}, projects); diff != "" {
		t.Errorf("projects (-want +got):\n%s", diff)
	}
}
