package attack

// The managed sidecars (/v1/admin/sidecars) are platform configuration:
// every route, reads included, is a platform admin's. A developer, a
// project admin, a project's API token and a project's events credential
// (as a bearer token, as basic auth and over NATS) try each route; a
// platform admin sends malformed specs (400 for a body that is no
// document of the contract, 422 naming the field for an invalid one, 413
// over the gateway's cap). Each is refused and nothing is stored: the bucket's version keys,
// its current version and the rollout's control keep their revisions.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/atoll/e2e"
)

// sidecarsProject is the attackers' project; the managed sidecar the
// test sets applies to sidecarsNone only, a project no test makes, so no
// other test's workload gets it.
const (
	sidecarsProject = "attack-sidecars"
	sidecarsNone    = "attack-sidecars-none"
)

// sidecarSpecDoc is a valid spec of one sidecar with image.
func sidecarSpecDoc(image string) string {
	return `{"sidecars":[{"name":"log","image":"` + image + `","projects":["` + sidecarsNone + `"],
		"resources":{"requests":{"cpu":"1m","memory":"1Mi"}}}],"rollout":{"maxUnavailable":1,"bakeSeconds":1}}`
}

// sidecarsRevisions maps every key of the sidecars bucket but the
// rollout's progress (admission's own) to its revision.
func sidecarsRevisions(t *testing.T) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := reg.Bus.KV(ctx, bus.BucketSidecars)
	require.NoError(t, err)
	keys, err := kv.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, k := range keys {
		if k == api.SidecarProgressKey {
			continue
		}
		e, err := kv.Get(ctx, k)
		require.NoError(t, err)
		out[k] = e.Revision()
	}
	return out
}

func TestAttackManagedSidecars(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if status, e := authDo(t, reg.GatewayURL, "POST", "/v1/projects", reg.AdminToken, []byte(`{"name":"`+sidecarsProject+`","owner":"attack-sc-owner"}`)); status != http.StatusCreated {
		t.Fatalf("create %s: %d %+v", sidecarsProject, status, e)
	}
	owner := reg.Token("attack-sc-owner", false, nil)
	dev := reg.Token("attack-sc-dev", false, map[string]string{sidecarsProject: "developer"})
	projectAdmin := reg.Token("attack-sc-admin", false, map[string]string{sidecarsProject: "admin"})
	projectToken := tokensCreate(t, owner, sidecarsProject, `{"name":"deploy","role":"admin","ttl":"1h"}`)
	ownerClient, err := sdk.New(reg.GatewayURL, sdk.WithToken(owner), sdk.WithHTTPClient(httpc))
	require.NoError(t, err)
	cred, err := ownerClient.CreateEventCredentials(ctx, sidecarsProject, api.EventCredentialRequest{Name: "sub"})
	require.NoError(t, err)

	// A version exists, so pause, resume and abort have a rollout to act on.
	if status, body := quotaCall(t, "PUT", "/v1/admin/sidecars", reg.AdminToken, []byte(sidecarSpecDoc("log:1"))); status != http.StatusCreated {
		t.Fatalf("a platform admin sets version 1: %d %s", status, body)
	}

	routes := []struct{ method, path, body string }{
		{"GET", "/v1/admin/sidecars", ""},
		{"PUT", "/v1/admin/sidecars", sidecarSpecDoc("log:evil")},
		{"GET", "/v1/admin/sidecars/history", ""},
		{"GET", "/v1/admin/sidecars/status", ""},
		{"POST", "/v1/admin/sidecars/pause", `{"reason":"mine"}`},
		{"POST", "/v1/admin/sidecars/resume", ""},
		{"POST", "/v1/admin/sidecars/abort", `{"reason":"mine"}`},
	}
	callers := []struct {
		name   string
		header string // the Authorization header
		status int
	}{
		{"a developer", "Bearer " + dev, http.StatusForbidden},
		{"a project admin", "Bearer " + projectAdmin, http.StatusForbidden},
		{"the project's owner", "Bearer " + owner, http.StatusForbidden},
		{"a project admin token", "Bearer " + projectToken, http.StatusForbidden},
		{"an events credential as a bearer token", "Bearer " + cred.Password, http.StatusUnauthorized},
		{"an events credential's user and secret as a bearer token", "Bearer " + cred.User + ":" + cred.Password, http.StatusUnauthorized},
		{"an events credential as basic auth", "Basic " + basicAuth(cred.User, cred.Password), http.StatusUnauthorized},
		{"no credential", "", http.StatusUnauthorized},
	}
	for _, c := range callers {
		for _, rt := range routes {
			t.Run(fmt.Sprintf("%s: %s %s", c.name, rt.method, rt.path), func(t *testing.T) {
				before := sidecarsRevisions(t)
				var body []byte
				if rt.body != "" {
					body = []byte(rt.body)
				}
				status, got := headerCall(t, rt.method, rt.path, c.header, body)
				if status != c.status {
					t.Errorf("status %d (%s), want %d", status, got, c.status)
				}
				if after := sidecarsRevisions(t); fmt.Sprint(after) != fmt.Sprint(before) {
					t.Errorf("the sidecars bucket was written: %v -> %v", before, after)
				}
			})
		}
	}

	t.Run("an events credential over NATS", func(t *testing.T) {
		before := sidecarsRevisions(t)
		nc, refused, err := eventsConn(t, eventsURL(t), cred.User, cred.Password, cred.InboxPrefix)
		require.NoError(t, err)
		kvSubject := "$KV." + bus.BucketSidecars + "."
		for _, subj := range []string{kvSubject + api.SidecarCurrentKey, kvSubject + api.SidecarControlKey, kvSubject + api.SidecarVersionKey(99),
			"$JS.API.DIRECT.GET.KV_" + bus.BucketSidecars, "$JS.API.STREAM.MSG.GET.KV_" + bus.BucketSidecars} {
			require.NoError(t, nc.Publish(subj, []byte(sidecarSpecDoc("log:evil"))))
			if !refused(subj) {
				t.Errorf("published to %s", subj)
			}
		}
		if after := sidecarsRevisions(t); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("the sidecars bucket was written: %v -> %v", before, after)
		}
	})

	huge := `{"sidecars":[{"name":"log","image":"` + strings.Repeat("a", 2<<20) + `"}]}`
	many := make([]string, 0, 400)
	for i := range 400 {
		many = append(many, fmt.Sprintf(`{"name":"s%d","image":"log:1"}`, i))
	}
	// A spec that is no JSON document of the contract is a 400; one that
	// is, but invalid, a 422 naming the field; a body over the gateway's
	// cap a 413. None is stored.
	specs := []struct {
		name, body string
		status     int
		field      string // the field the 422 names
	}{
		{"an empty image", `{"sidecars":[{"name":"log","image":""}]}`, http.StatusUnprocessableEntity, "sidecars[0].image"},
		{"no image", `{"sidecars":[{"name":"log"}]}`, http.StatusUnprocessableEntity, "sidecars[0].image"},
		{"a duplicate name", `{"sidecars":[{"name":"log","image":"log:1"},{"name":"log","image":"log:2"}]}`, http.StatusUnprocessableEntity, "sidecars[1].name"},
		{"a name that is no DNS label", `{"sidecars":[{"name":"Log_1","image":"log:1"}]}`, http.StatusUnprocessableEntity, "sidecars[0].name"},
		{"a negative maxUnavailable", `{"sidecars":[{"name":"log","image":"log:1"}],"rollout":{"maxUnavailable":-1}}`, http.StatusUnprocessableEntity, "rollout.maxUnavailable"},
		{"a negative bake", `{"sidecars":[{"name":"log","image":"log:1"}],"rollout":{"bakeSeconds":-5}}`, http.StatusUnprocessableEntity, "rollout.bakeSeconds"},
		{"an unknown onFailure", `{"sidecars":[{"name":"log","image":"log:1"}],"rollout":{"onFailure":"Explode"}}`, http.StatusUnprocessableEntity, "rollout.onFailure"},
		{"a privileged sidecar", `{"sidecars":[{"name":"log","image":"log:1","privileged":true}]}`, http.StatusUnprocessableEntity, "sidecars[0].privileged"},
		{"an unknown kind", `{"sidecars":[{"name":"log","image":"log:1","kinds":["Nope"]}]}`, http.StatusUnprocessableEntity, "sidecars[0].kinds[0]"},
		{"a project that is no name", `{"sidecars":[{"name":"log","image":"log:1","projects":["../x"]}]}`, http.StatusUnprocessableEntity, "sidecars[0].projects[0]"},
		{"a cpu that is no quantity", `{"sidecars":[{"name":"log","image":"log:1","resources":{"requests":{"cpu":"lots"}}}]}`, http.StatusUnprocessableEntity, "sidecars[0].resources.requests.cpu"},
		{"an image that is no reference", `{"sidecars":[{"name":"log","image":"log:1 --privileged"}]}`, http.StatusUnprocessableEntity, "sidecars[0].image"},
		{"400 sidecars, one of them invalid", `{"sidecars":[` + strings.Join(many, ",") + `,{"name":"x","image":""}]}`, http.StatusUnprocessableEntity, "sidecars[400].image"},
		{"an unknown field", `{"sidecars":[{"name":"log","image":"log:1","hostPID":true}]}`, http.StatusBadRequest, ""},
		{"a string for maxUnavailable", `{"sidecars":[],"rollout":{"maxUnavailable":"all"}}`, http.StatusBadRequest, ""},
		{"trailing data", `{"sidecars":[]} {"sidecars":[]}`, http.StatusBadRequest, ""},
		{"not JSON", `sidecars: []`, http.StatusBadRequest, ""},
		{"an empty body", ``, http.StatusBadRequest, ""},
		{"a body over the gateway's cap", huge, http.StatusRequestEntityTooLarge, ""},
	}
	for _, tc := range specs {
		t.Run("a platform admin sets "+tc.name, func(t *testing.T) {
			before := sidecarsRevisions(t)
			status, got := quotaCall(t, "PUT", "/v1/admin/sidecars", reg.AdminToken, []byte(tc.body))
			if status != tc.status {
				t.Errorf("status %d (%.300s), want %d", status, got, tc.status)
			}
			var e computeapi.Error
			_ = json.Unmarshal(got, &e)
			var fields []string
			for _, f := range e.Fields {
				fields = append(fields, f.Field)
			}
			if tc.field != "" && !slices.Contains(fields, tc.field) {
				t.Errorf("the refusal names %v, want %s", fields, tc.field)
			}
			if after := sidecarsRevisions(t); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("the sidecars bucket was written: %v -> %v", before, after)
			}
		})
	}

	// The platform admin still reads version 1, untouched, and can act.
	status, body := quotaCall(t, "GET", "/v1/admin/sidecars", reg.AdminToken, nil)
	if status != http.StatusOK || !strings.Contains(string(body), `"log:1"`) || !strings.Contains(string(body), `"version":1`) {
		t.Errorf("the current version after the attacks: %d %s", status, body)
	}
	if status, body := quotaCall(t, "POST", "/v1/admin/sidecars/pause", reg.AdminToken, []byte(`{"reason":"attack test"}`)); status != http.StatusOK {
		t.Errorf("a platform admin pauses: %d %s", status, body)
	}
	if status, body := quotaCall(t, "POST", "/v1/admin/sidecars/resume", reg.AdminToken, nil); status != http.StatusOK {
		t.Errorf("a platform admin resumes: %d %s", status, body)
	}
}

// headerCall sends one request to the gateway with the Authorization
// header given (none when empty) and returns the status and the body.
func headerCall(t *testing.T, method, path, authorization string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, reg.GatewayURL+path, bytes.NewReader(body))
	require.NoError(t, err)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	require.NoError(t, err)
	return resp.StatusCode, b
}

// basicAuth is the value of a basic Authorization header.
func basicAuth(user, pass string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(user, pass)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}
