package attack

// The API's front door: project names that would reach the platform's
// own namespace or make no namespace at all, tokens past their expiry,
// and tokens removed from the tokens file. Each is refused with the
// documented 4xx, and nothing is written.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/atoll/e2e"
)

// authProject is the project the attacker is a developer of.
const authProject = "attack-auth"

// authApp is a small, valid App document for project (the path names it).
func authApp(name string) []byte {
	return []byte(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":"` + name + `"},
		"spec":{"replicas":1,"tier":"OnDemand","template":{"containers":[{"name":"web","image":"nginx:1.27",
		"resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`)
}

// authDo sends one request to the gateway at base (every request of this
// file goes through it) and returns the status and the decoded error body.
func authDo(t *testing.T, base, method, path, token string, body []byte) (int, computeapi.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e computeapi.Error
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("%s %s: status %d, body not an error: %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, e
}

// authBuckets are the buckets a workload request writes.
var authBuckets = []string{bus.BucketWorkloads, bus.BucketQuota, bus.BucketPlacements, bus.BucketIdempotency}

// authRevisions is the last revision of each of authBuckets.
func authRevisions(t *testing.T) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]uint64{}
	for _, name := range authBuckets {
		kv, err := reg.Bus.KV(ctx, name)
		if err != nil {
			t.Fatalf("bucket %s: %v", name, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatalf("bucket %s: %v", name, err)
		}
		bs, ok := st.(*jetstream.KeyValueBucketStatus)
		if !ok {
			t.Fatalf("bucket %s: status %T", name, st)
		}
		out[name] = bs.StreamInfo().State.LastSeq
	}
	return out
}

// authGateways are the addresses of every gateway replica.
func authGateways() []string {
	var out []string
	for _, u := range reg.GatewayURLs() {
		if u != "" {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		out = []string{reg.GatewayURL}
	}
	return out
}

// A project named like the platform's namespaces, or too long to make a
// namespace (atoll-<project> is at most 63 characters), is refused with
// 422 naming metadata.project, even to a caller granted a role in it.
func TestAttackProjectNames(t *testing.T) {
	e2e.Need(t)
	long := strings.Repeat("p", 64)
	tests := []struct {
		name    string
		project string
	}{
		{"the platform's own namespace", "system"},
		{"kubernetes' namespace", "kube-system"},
		{"64 characters", long},
		{"58 characters: atoll-<project> is 64", strings.Repeat("q", 58)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := reg.Token("attacker-names", false, map[string]string{tc.project: "developer"})
			before := authRevisions(t)
			status, e := authDo(t, reg.GatewayURL, "POST", "/v1/projects/"+tc.project+"/workloads", tok, authApp("web"))
			if status != http.StatusUnprocessableEntity || !authNamesField(e, "metadata.project") {
				t.Errorf("status %d, error %+v; want 422 naming metadata.project", status, e)
			}
			if diff := cmp.Diff(before, authRevisions(t)); diff != "" {
				t.Errorf("buckets written (-before +after):\n%s", diff)
			}
		})
	}
}

func authNamesField(e computeapi.Error, field string) bool {
	for _, f := range e.Fields {
		if f.Field == field {
			return true
		}
	}
	return false
}

// A token past its expiry is refused with 401 saying it expired, on
// every gateway replica, and writes nothing.
func TestAttackExpiredToken(t *testing.T) {
	e2e.Need(t)
	tok := reg.TokenUntil("attacker-expired", false, map[string]string{authProject: "developer"}, time.Now().Add(-time.Minute))
	before := authRevisions(t)
	for _, gw := range authGateways() {
		status, e := authDo(t, gw, "POST", "/v1/projects/"+authProject+"/workloads", tok, authApp("expired"))
		if status != http.StatusUnauthorized || !strings.Contains(e.Message, "expired") {
			t.Errorf("%s: status %d, error %+v; want 401 saying the token expired", gw, status, e)
		}
	}
	if diff := cmp.Diff(before, authRevisions(t)); diff != "" {
		t.Errorf("buckets written (-before +after):\n%s", diff)
	}
}

// A token removed from the tokens file is refused by every gateway
// replica within 10 s, with no restart; 10 s after its removal it
// writes nothing.
func TestAttackRevokedToken(t *testing.T) {
	e2e.Need(t)
	tok := reg.Token("attacker-revoked", false, map[string]string{authProject: "developer"})
	for _, gw := range authGateways() {
		if status, e := authDo(t, gw, "GET", "/v1/projects/"+authProject+"/workloads", tok, nil); status != http.StatusOK {
			t.Fatalf("%s: before the revocation: status %d, error %+v", gw, status, e)
		}
	}
	if err := reg.RevokeToken(tok); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	const bound = 10 * time.Second
	// Every replica stops taking it within the bound...
	for _, gw := range authGateways() {
		for {
			status, _ := authDo(t, gw, "GET", "/v1/projects/"+authProject+"/workloads", tok, nil)
			if status == http.StatusUnauthorized {
				t.Logf("%s refuses the token %v after its removal", gw, time.Since(removed).Round(time.Millisecond))
				break
			}
			if time.Since(removed) > bound {
				t.Fatalf("%s: status %d %v after the token's removal, want 401", gw, status, time.Since(removed).Round(time.Millisecond))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	// ...and at the bound, a write with it is refused and writes nothing.
	time.Sleep(time.Until(removed.Add(bound)))
	before := authRevisions(t)
	for _, gw := range authGateways() {
		status, e := authDo(t, gw, "POST", "/v1/projects/"+authProject+"/workloads", tok, authApp("revoked"))
		if status != http.StatusUnauthorized || e.Code != "Unauthenticated" {
			t.Errorf("%s: status %d, error %+v; want 401", gw, status, e)
		}
	}
	if diff := cmp.Diff(before, authRevisions(t)); diff != "" {
		t.Errorf("buckets written (-before +after):\n%s", diff)
	}
	if err := reg.RevokeToken(tok); err == nil {
		t.Error("a token revoked twice was found again")
	}
}
