package attack

// Quota requests: only platform admins decide them. A developer and a
// project admin try to approve or reject a request (their own project's
// included), a project admin asks for more quota for a project it is no
// admin of, and a platform admin names a request under another project's
// path. Each gets the documented refusal, the request stays pending and
// neither project's ledger is written.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
)

// quotaKeyRevision is the revision of key in the quota bucket (0: none).
func quotaKeyRevision(t *testing.T, key string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := reg.Bus.KV(ctx, bus.BucketQuota)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0
	case err != nil:
		t.Fatal(err)
	}
	return e.Revision()
}

func TestAttackQuotaRequests(t *testing.T) {
	e2e.Need(t)
	const a, b = "attack-qr-a", "attack-qr-b"
	for _, p := range []string{a, b} {
		if status, e := authDo(t, reg.GatewayURL, "POST", "/v1/projects", reg.AdminToken, []byte(`{"name":"`+p+`","owner":"attack-qr-owner-`+p+`"}`)); status != http.StatusCreated {
			t.Fatalf("create %s: %d %+v", p, status, e)
		}
	}
	adminA := reg.Token("attack-qr-admin", false, map[string]string{a: "admin"})
	devA := reg.Token("attack-qr-dev", false, map[string]string{a: "developer"})
	adminB := reg.Token("attack-qr-admin-b", false, map[string]string{b: "admin"})
	stranger := reg.Token("attack-qr-stranger", false, nil)
	ask := []byte(`{"tier":"OnDemand","cpu":"64","memory":"256Gi","reason":"launch"}`)

	// A request of each project, pending.
	ids := map[string]string{}
	for p, tok := range map[string]string{a: adminA, b: adminB} {
		status, body := quotaCall(t, "POST", "/v1/projects/"+p+"/quota/requests", tok, ask)
		var r struct{ ID string }
		if status != http.StatusCreated || json.Unmarshal(body, &r) != nil {
			t.Fatalf("request for %s: %d %s", p, status, body)
		}
		ids[p] = r.ID
	}
	keys := []string{api.QuotaProjectKey(a), api.QuotaProjectKey(b)}
	for _, p := range []string{a, b} {
		proj, n, err := api.ParseQuotaRequestID(ids[p])
		if err != nil || proj != p {
			t.Fatalf("request ID %q of %s: %v", ids[p], p, err)
		}
		keys = append(keys, api.QuotaRequestKey(p, n))
	}
	decide := func(p, id, d string) string { return "/v1/projects/" + p + "/quota/requests/" + id + "/" + d }
	tests := []struct {
		name, method, path, token, body string
		status                          int
	}{
		{"a developer approves", "POST", decide(a, ids[a], "approve"), devA, `{}`, http.StatusForbidden},
		{"a project admin approves its own project's request", "POST", decide(a, ids[a], "approve"), adminA, `{}`, http.StatusForbidden},
		{"a project admin rejects another's request", "POST", decide(a, ids[a], "reject"), adminB, `{"reason":"mine first"}`, http.StatusForbidden},
		{"a project admin approves through its own project's path", "POST", decide(a, ids[b], "approve"), adminA, `{}`, http.StatusForbidden},
		{"a platform admin names b's request under a", "POST", decide(a, ids[b], "approve"), reg.AdminToken, `{}`, http.StatusNotFound},
		{"a project admin of a asks for b", "POST", "/v1/projects/" + b + "/quota/requests", adminA, string(ask), http.StatusForbidden},
		{"a developer asks", "POST", "/v1/projects/" + a + "/quota/requests", devA, string(ask), http.StatusForbidden},
		{"a stranger lists a's requests", "GET", "/v1/projects/" + a + "/quota/requests", stranger, "", http.StatusForbidden},
		{"a project admin lists every project's", "GET", "/v1/quota/requests", adminA, "", http.StatusForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before []uint64
			for _, k := range keys {
				before = append(before, quotaKeyRevision(t, k))
			}
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			if status, got := quotaCall(t, tc.method, tc.path, tc.token, body); status != tc.status {
				t.Errorf("status %d (%s), want %d", status, got, tc.status)
			}
			for i, k := range keys {
				if after := quotaKeyRevision(t, k); after != before[i] {
					t.Errorf("quota key %s written: revision %d -> %d", k, before[i], after)
				}
			}
		})
	}
	// Both requests are still pending, as a's admin reads them.
	status, body := quotaCall(t, "GET", "/v1/projects/"+a+"/quota/requests?state=pending", adminA, nil)
	var l struct{ Items []struct{ ID, State string } }
	if status != http.StatusOK || json.Unmarshal(body, &l) != nil || len(l.Items) != 1 || l.Items[0].ID != ids[a] {
		t.Errorf("a's pending requests: %d %s", status, body)
	}
	// The requests are no one's to leave pending: a platform admin rejects them.
	for _, p := range []string{a, b} {
		if status, body := quotaCall(t, "POST", decide(p, ids[p], "reject"), reg.AdminToken, []byte(`{"reason":"attack test"}`)); status != http.StatusOK {
			t.Errorf("reject %s: %d %s", ids[p], status, body)
		}
	}
}
