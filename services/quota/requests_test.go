package quota

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

func launchRequest(project string) api.QuotaRequestCreate {
	return api.QuotaRequestCreate{Project: project, Tier: "OnDemand", CPU: "64", Memory: "256Gi", Reason: "launch", Requester: "alice"}
}

func TestRequestInvalid(t *testing.T) {
	s := newReplica(t, openBus(t), "quota", nil)
	neg := int64(-1)
	for _, tc := range []struct {
		name  string
		edit  func(*api.QuotaRequestCreate)
		field string
	}{
		{"unknown tier", func(c *api.QuotaRequestCreate) { c.Tier = "Gold" }, "tier"},
		{"negative cpu", func(c *api.QuotaRequestCreate) { c.CPU = "-4" }, "cpu"},
		{"unparsable memory", func(c *api.QuotaRequestCreate) { c.Memory = "lots" }, "memory"},
		{"negative pods", func(c *api.QuotaRequestCreate) { c.Pods = &neg }, "pods"},
		{"empty reason", func(c *api.QuotaRequestCreate) { c.Reason = "  " }, "reason"},
		{"no amount", func(c *api.QuotaRequestCreate) { c.CPU, c.Memory = "", "" }, "cpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := launchRequest("web")
			tc.edit(&c)
			_, err := s.CreateRequest(context.Background(), c)
			var fe api.FieldErrors
			require.ErrorAs(t, err, &fe)
			require.Len(t, fe, 1)
			require.Equal(t, tc.field, fe[0].Field)
		})
	}
	items, err := s.ListRequests(context.Background(), api.QuotaRequestList{})
	require.NoError(t, err)
	require.Empty(t, items, "an invalid request stores nothing")
}

// TestApproveRetry crashes an approval after each of its steps and
// checks that the request is never approved without its limits, nor
// pending with them, and that a retried approve applies them once.
func TestApproveRetry(t *testing.T) {
	for _, step := range []string{"approve-intent", "approve-decided"} {
		t.Run(step, func(t *testing.T) {
			ctx := context.Background()
			b := openBus(t)
			s := newReplica(t, b, "quota", nil)
			r, err := s.CreateRequest(ctx, launchRequest("web"))
			require.NoError(t, err)
			require.Equal(t, "web-1", r.ID)

			s.fail = crashAt(step)
			_, err = s.Decide(ctx, api.QuotaRequestDecide{ID: r.ID, Approve: true, Reviewer: "admin"})
			require.ErrorIs(t, err, errCrash)
			s.fail = nil
			cur, _, err := s.readRequest(ctx, r.ID)
			require.NoError(t, err)
			require.Equal(t, api.QuotaRequestApproving, cur.State, "between the steps the request is approving")
			l := ledgerOf(t, s, "web")
			require.Equal(t, step == "approve-decided", slices.Contains(l.Grants, r.ID), "grants after the crash")

			// A platform admin changes the tier meanwhile: a retry must
			// not apply the request a second time over that change.
			if step == "approve-decided" {
				require.NoError(t, s.SetLimit(ctx, "web", api.TierOnDemand, api.Limit{MilliCPU: new(int64(1000))}))
			}
			other := newReplica(t, b, "quota-2", nil) // the retry lands on another replica
			got, err := other.Decide(ctx, api.QuotaRequestDecide{ID: r.ID, Approve: true, Reviewer: "admin"})
			require.NoError(t, err)
			require.Equal(t, api.QuotaRequestApproved, got.State)
			require.Equal(t, "admin", got.Reviewer)

			l = ledgerOf(t, s, "web")
			wantCPU := int64(64_000)
			if step == "approve-decided" {
				wantCPU = 1000
			}
			require.Equal(t, wantCPU, *l.Limits[api.TierOnDemand].MilliCPU)
			if step == "approve-intent" {
				require.Equal(t, int64(256<<30), *l.Limits[api.TierOnDemand].MemoryBytes)
			}
			require.Equal(t, []string{r.ID}, l.Grants, "applied once")

			_, err = other.Decide(ctx, api.QuotaRequestDecide{ID: r.ID, Approve: true, Reviewer: "admin"})
			require.ErrorIs(t, err, ErrDecided)
			_, err = other.Decide(ctx, api.QuotaRequestDecide{ID: r.ID, Reason: "no", Reviewer: "admin"})
			require.ErrorIs(t, err, ErrDecided)
		})
	}
}

// TestRepairApproval: an approval whose approver died is finished by the
// repair sweep.
func TestRepairApproval(t *testing.T) {
	ctx := context.Background()
	s := newReplica(t, openBus(t), "quota", nil)
	r, err := s.CreateRequest(ctx, launchRequest("web"))
	require.NoError(t, err)
	s.fail = crashAt("approve-intent")
	_, err = s.Decide(ctx, api.QuotaRequestDecide{ID: r.ID, Approve: true, Reviewer: "admin"})
	require.ErrorIs(t, err, errCrash)
	s.fail = nil
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.RepairApprovals(ctx, 0))
		cur, _, err := s.readRequest(ctx, r.ID)
		require.NoError(c, err)
		require.Equal(c, api.QuotaRequestApproved, cur.State)
	}, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, int64(64_000), *ledgerOf(t, s, "web").Limits[api.TierOnDemand].MilliCPU)
}

func TestRejectAndEvents(t *testing.T) {
	ctx := context.Background()
	b := openBus(t)
	s := newReplica(t, b, "quota", nil)
	require.NoError(t, s.SetLimit(ctx, "web", api.TierOnDemand, api.Limit{MilliCPU: new(int64(8000))}))
	before := ledgerOf(t, s, "web")
	r, err := s.CreateRequest(ctx, launchRequest("web"))
	require.NoError(t, err)

	_, err = s.Decide(ctx, api.QuotaRequestDecide{ID: r.ID, Reviewer: "admin"})
	var fe api.FieldErrors
	require.ErrorAs(t, err, &fe, "a rejection without a reason")
	require.Equal(t, "reason", fe[0].Field)

	got, err := s.Decide(ctx, api.QuotaRequestDecide{ID: r.ID, Reviewer: "admin", Reason: "not this quarter"})
	require.NoError(t, err)
	require.Equal(t, api.QuotaRequestRejected, got.State)
	if diff := cmp.Diff(before, ledgerOf(t, s, "web")); diff != "" {
		t.Errorf("ledger after a rejection (-want +got):\n%s", diff)
	}
	_, err = s.Decide(ctx, api.QuotaRequestDecide{ID: r.ID, Approve: true, Reviewer: "admin"})
	require.ErrorIs(t, err, ErrDecided)
	_, err = s.Decide(ctx, api.QuotaRequestDecide{ID: "web-9", Approve: true, Reviewer: "admin"})
	var be *bus.Error
	require.True(t, errors.As(err, &be) && be.Status == api.StatusNotFound, "missing request: %v", err)

	// Both steps are events on the project's subject.
	var events []string
	stream, err := b.Stream(ctx, bus.StreamEvents)
	require.NoError(t, err)
	for _, ev := range []string{EventRequested, EventRejected} {
		m, err := stream.GetLastMsgForSubject(ctx, bus.EventSubject("web", api.KindQuotaRequest, r.ID, ev))
		require.NoError(t, err, ev)
		var we api.WorkloadEvent
		require.NoError(t, json.Unmarshal(m.Data, &we))
		events = append(events, we.Event)
	}
	require.Equal(t, []string{EventRequested, EventRejected}, events)

	items, err := s.ListRequests(ctx, api.QuotaRequestList{Project: "web", State: api.QuotaRequestRejected})
	require.NoError(t, err)
	require.Len(t, items, 1)
	require.Equal(t, "not this quarter", items[0].Decision)
	items, err = s.ListRequests(ctx, api.QuotaRequestList{State: api.QuotaRequestPending})
	require.NoError(t, err)
	require.Empty(t, items)
}

func TestParseQuotaRequestID(t *testing.T) {
	for _, tc := range []struct {
		id      string
		project string
		n       uint64
		ok      bool
	}{
		{"web-1", "web", 1, true},
		{"my-web-12", "my-web", 12, true},
		{"web", "", 0, false},
		{"web-", "", 0, false},
		{"-1", "", 0, false},
		{"web-0", "", 0, false},
		{"Web-1", "", 0, false},
	} {
		p, n, err := api.ParseQuotaRequestID(tc.id)
		require.Equal(t, tc.ok, err == nil, tc.id)
		require.Equal(t, tc.project, p, tc.id)
		require.Equal(t, tc.n, n, tc.id)
	}
}
