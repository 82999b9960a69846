package projects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/gateway"
)

// bigApp is an App of one replica asking for cpu cores.
func bigApp(name, cpu string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":%q},
"spec":{"replicas":1,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":%q,"memory":"16Mi"}}}]}}}`, name, cpu)
}

// fieldOf is the single field an API error names ("" if it names none or several).
func fieldOf(err error) string {
	var se *sdk.Error
	if !errors.As(err, &se) || len(se.Body.Fields) != 1 {
		return ""
	}
	return se.Body.Fields[0].Field
}

// TestQuotaRequestApprovedAdmitsTheCreateThatNeededIt: alice, admin of a
// project capped at 1 core, is refused an App of 2; she asks for 64, a
// platform admin approves, and the same create is admitted. A second
// request, rejected with a reason, leaves the quota as it was. Bad input
// is refused naming the field; a decided request cannot be decided again
// (409); alice sees the outcomes; every step is an event on the
// project's subject and an audit record.
func TestQuotaRequestApprovedAdmitsTheCreateThatNeededIt(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const project = "quotareq"
	admin := client(t, reg.GatewayURL, reg.AdminToken)
	alice := client(t, reg.GatewayURL, reg.Token("alice", false, nil))

	_, err := admin.CreateProject(ctx, computeapi.ProjectCreate{Name: project, Owner: "alice"})
	require.NoError(t, err)
	_, err = admin.SetQuota(ctx, project, "OnDemand", computeapi.QuotaLimit{MilliCPU: new(int64(1000))})
	require.NoError(t, err)

	// 1. Refused for quota.
	_, err = alice.CreateWorkloadJSON(ctx, project, bigApp("big", "2"), "")
	var se *sdk.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, 409, se.Status)
	require.Equal(t, "QuotaExceeded", se.Code())

	// 2. Bad requests name their field.
	for _, tc := range []struct {
		field string
		req   computeapi.QuotaRequestCreate
	}{
		{"tier", computeapi.QuotaRequestCreate{Tier: "Gold", Cpu: "64", Reason: "launch"}},
		{"cpu", computeapi.QuotaRequestCreate{Tier: "OnDemand", Cpu: "-64", Reason: "launch"}},
		{"memory", computeapi.QuotaRequestCreate{Tier: "OnDemand", Memory: "lots", Reason: "launch"}},
		{"reason", computeapi.QuotaRequestCreate{Tier: "OnDemand", Cpu: "64"}},
	} {
		_, err := alice.RequestQuota(ctx, project, tc.req)
		if assert.ErrorAs(t, err, &se, tc.field) {
			assert.Equal(t, 422, se.Status, tc.field)
			assert.Equal(t, tc.field, fieldOf(err), "%v", err)
		}
	}

	// 3. Asked, approved, admitted.
	qr, err := alice.RequestQuota(ctx, project, computeapi.QuotaRequestCreate{Tier: "OnDemand", Cpu: "64", Memory: "256Gi", Reason: "launch"})
	require.NoError(t, err)
	require.Equal(t, computeapi.QuotaRequestState("pending"), qr.State)
	_, err = alice.ApproveQuotaRequest(ctx, qr.Id, "")
	require.True(t, sdk.IsForbidden(err), "alice approves her own request: %v", err)

	pending, err := admin.QuotaRequests(ctx, "", "pending")
	require.NoError(t, err)
	require.True(t, containsRequest(pending, qr.Id), "the platform admins' queue holds %s: %v", qr.Id, pending)

	got, err := admin.ApproveQuotaRequest(ctx, qr.Id, "ok for the launch")
	require.NoError(t, err)
	assert.Equal(t, computeapi.QuotaRequestState("approved"), got.State)
	assert.Equal(t, "admin", got.Reviewer)
	_, err = admin.ApproveQuotaRequest(ctx, qr.Id, "")
	assert.True(t, sdk.IsConflict(err), "approved twice: %v", err)
	_, err = admin.RejectQuotaRequest(ctx, qr.Id, "too late")
	assert.True(t, sdk.IsConflict(err), "rejected once approved: %v", err)

	_, err = alice.CreateWorkloadJSON(ctx, project, bigApp("big", "2"), "")
	require.NoError(t, err, "the create the approval was for")
	t.Cleanup(func() { _ = admin.Delete(context.Background(), project, "App", "big") })

	// 4. Rejected: the quota is unchanged.
	before, err := alice.Quota(ctx, project)
	require.NoError(t, err)
	qr2, err := alice.RequestQuota(ctx, project, computeapi.QuotaRequestCreate{Tier: "Reserved", Cpu: "8", Reason: "more"})
	require.NoError(t, err)
	_, err = admin.RejectQuotaRequest(ctx, qr2.Id, "")
	assert.Equal(t, "reason", fieldOf(err), "a rejection without a reason: %v", err)
	got2, err := admin.RejectQuotaRequest(ctx, qr2.Id, "not this quarter")
	require.NoError(t, err)
	assert.Equal(t, computeapi.QuotaRequestState("rejected"), got2.State)
	after, err := alice.Quota(ctx, project)
	require.NoError(t, err)
	for i := range before.Tiers {
		before.Tiers[i].Used, after.Tiers[i].Used = computeapi.Resources{}, computeapi.Resources{}
	}
	before.Workloads, after.Workloads = 0, 0
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("quota after a rejection (-before +after):\n%s", diff)
	}

	// 5. Alice sees the outcomes.
	mine, err := alice.QuotaRequests(ctx, project, "")
	require.NoError(t, err)
	require.Len(t, mine, 2)
	assert.Equal(t, []string{"approved", "rejected"}, []string{string(mine[0].State), string(mine[1].State)})
	assert.Equal(t, []string{"admin", "admin"}, []string{mine[0].Reviewer, mine[1].Reviewer})
	assert.Equal(t, "not this quarter", mine[1].Decision)
	_, err = client(t, reg.GatewayURL, reg.Token("carol", false, nil)).QuotaRequests(ctx, project, "")
	assert.True(t, sdk.IsForbidden(err), "a stranger lists the project's requests: %v", err)

	// 6. Events on the project's subject.
	events, err := reg.Bus.Stream(ctx, bus.StreamEvents)
	require.NoError(t, err)
	for _, ev := range []struct{ id, event string }{{qr.Id, "requested"}, {qr.Id, "approved"}, {qr2.Id, "requested"}, {qr2.Id, "rejected"}} {
		_, err := events.GetLastMsgForSubject(ctx, bus.EventSubject(project, api.KindQuotaRequest, ev.id, ev.event))
		assert.NoError(t, err, "event %s of %s", ev.event, ev.id)
	}

	// 7. The audit stream holds every step.
	want := []string{
		"request-quota success " + project + "/quota/requests",
		"approve denied " + qr.Id + "/approve", // alice's
		"approve success " + qr.Id + "/approve",
		"approve failure " + qr.Id + "/approve", // 409
		"reject failure " + qr.Id + "/reject",   // 409
		"request-quota success " + project + "/quota/requests",
		"reject failure " + qr2.Id + "/reject", // no reason
		"reject success " + qr2.Id + "/reject",
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, want, auditOf(t, ctx, project, "request-quota", "approve", "reject"))
	}, 5*time.Second, 100*time.Millisecond)
}

func containsRequest(items []computeapi.QuotaRequest, id string) bool {
	for _, q := range items {
		if q.Id == id {
			return true
		}
	}
	return false
}

// auditOf reads the project's audit records of verbs, in order, as
// "verb outcome path-tail" (the denied ones, such as bad input refused
// before the quota service, included).
func auditOf(t *testing.T, ctx context.Context, project string, verbs ...string) []string {
	t.Helper()
	s, err := reg.Bus.Stream(ctx, bus.StreamAudit)
	require.NoError(t, err)
	var filters []string
	for _, v := range verbs {
		filters = append(filters, bus.AuditSubject(project, v))
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
	require.NoError(t, err)
	var out []string
	for {
		batch, err := cons.FetchNoWait(100)
		require.NoError(t, err)
		n := 0
		for m := range batch.Messages() {
			n++
			var rec gateway.AuditRecord
			require.NoError(t, json.Unmarshal(m.Data(), &rec))
			if rec.Status == 422 && rec.Verb == "request-quota" {
				continue // the bad requests of step 2
			}
			tail := rec.Path[strings.LastIndex(rec.Path, "/quota/requests")+len("/quota/requests"):]
			if tail == "" {
				tail = project + "/quota/requests"
			} else {
				tail = strings.TrimPrefix(tail, "/")
			}
			out = append(out, rec.Verb+" "+rec.Outcome+" "+tail)
		}
		if n == 0 {
			return out
		}
	}
}
