package quota_test

import (
	"context"
	"testing"

	"atoll.dev/libs/api"
)

// TestForgetProject: a deleted project's ledger is refused while it holds
// a reservation and deleted once it holds none; a project of the same
// name then starts from nothing.
func TestForgetProject(t *testing.T) {
	_, s := start(t)
	ctx := context.Background()
	if err := s.SetLimit(ctx, "gone", api.TierOnDemand, api.Limit{Pods: new(int64(10))}); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(ctx, "gone", "gone.app.web", api.Demand{Tier: api.TierOnDemand, Pods: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRequest(ctx, api.QuotaRequestCreate{Project: "gone", Tier: "OnDemand", CPU: "64", Reason: "launch", Requester: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRequest(ctx, api.QuotaRequestCreate{Project: "kept", Tier: "OnDemand", CPU: "64", Reason: "launch", Requester: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetProject(ctx, "gone"); err == nil {
		t.Fatal("forgot a ledger holding a reservation")
	}
	if rs, _ := s.ListRequests(ctx, api.QuotaRequestList{Project: "gone"}); len(rs) != 1 {
		t.Errorf("a refused forget changed the quota requests: %v", rs)
	}
	if err := s.Release(ctx, "gone", "gone.app.web"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the second finds nothing to forget
		if err := s.ForgetProject(ctx, "gone"); err != nil {
			t.Fatalf("forget %d: %v", i, err)
		}
	}
	if l := ledger(t, s, "gone"); len(l.Limits) != 0 || l.Reservations != 0 {
		t.Errorf("ledger after forgetting: limits %v, reservations %d", l.Limits, l.Reservations)
	}
	if rs, err := s.ListRequests(ctx, api.QuotaRequestList{Project: "gone"}); err != nil || len(rs) != 0 {
		t.Errorf("quota requests of a forgotten project: %v (%v)", rs, err)
	}
	if rs, _ := s.ListRequests(ctx, api.QuotaRequestList{Project: "kept"}); len(rs) != 1 {
		t.Errorf("another project's quota requests: %v", rs)
	}
}
