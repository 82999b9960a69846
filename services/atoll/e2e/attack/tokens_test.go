package attack

// Project tokens: a developer tries to create, list and revoke tokens; a
// project token tries to act on another project, and to mint tokens (an
// admin token for itself among them), and to reach the region's
// platform-admin calls. Each gets the documented refusal and the
// projects bucket, where tokens live, is unchanged.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/computeapi"
	"atoll.dev/services/atoll/e2e"
)

// tokensCreate creates a token in project as token's holder and returns
// its secret.
func tokensCreate(t *testing.T, token, project, body string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", reg.GatewayURL+"/v1/projects/"+project+"/tokens", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out computeapi.ProjectToken
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated || out.Secret == "" {
		t.Fatalf("create token in %s: %d %v", project, resp.StatusCode, err)
	}
	return out.Secret
}

func TestAttackProjectTokens(t *testing.T) {
	e2e.Need(t)
	const project, other = "attack-tokens", "attack-tokens-other"
	for _, p := range []string{project, other} {
		status, e := authDo(t, reg.GatewayURL, "POST", "/v1/projects", reg.AdminToken, []byte(`{"name":"`+p+`","owner":"attack-token-owner"}`))
		if status != http.StatusCreated {
			t.Fatalf("create %s: %d %+v", p, status, e)
		}
	}
	owner := reg.Token("attack-token-owner", false, nil)
	dev := reg.Token("attack-token-dev", false, map[string]string{project: "developer"})
	adminTok := tokensCreate(t, owner, project, `{"name":"deploy","role":"admin","ttl":"1h"}`)
	devTok := tokensCreate(t, owner, project, `{"name":"ci","role":"developer","ttl":"1h"}`)
	// Each token's first use is recorded (its last use, in the projects
	// bucket); use them once now, so the cases below write nothing.
	for _, tok := range []string{adminTok, devTok} {
		if status, e := authDo(t, reg.GatewayURL, "GET", "/v1/projects/"+project+"/workloads", tok, nil); status != http.StatusOK {
			t.Fatalf("a token lists its project: %d %+v", status, e)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, _ := authDo(t, reg.GatewayURL, "GET", "/v1/projects/"+project+"/tokens", owner, nil)
		if status != http.StatusOK {
			t.Fatalf("the owner lists tokens: %d", status)
		}
		rev := projectsRevision(t)
		time.Sleep(200 * time.Millisecond)
		if projectsRevision(t) == rev {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the projects bucket keeps changing")
		}
	}

	tests := []struct {
		name, method, path, token, body string
		status                          int
	}{
		{"a developer creates a token", "POST", "/v1/projects/" + project + "/tokens", dev, `{"name":"mine","role":"developer","ttl":"1h"}`, http.StatusForbidden},
		{"a developer lists the tokens", "GET", "/v1/projects/" + project + "/tokens", dev, "", http.StatusForbidden},
		{"a developer revokes a token", "DELETE", "/v1/projects/" + project + "/tokens/deploy", dev, "", http.StatusForbidden},
		{"a developer token creates a token", "POST", "/v1/projects/" + project + "/tokens", devTok, `{"name":"mine","role":"developer","ttl":"1h"}`, http.StatusForbidden},
		{"a developer token mints an admin token", "POST", "/v1/projects/" + project + "/tokens", devTok, `{"name":"root","role":"admin","ttl":"1h"}`, http.StatusForbidden},
		{"an admin token mints an admin token", "POST", "/v1/projects/" + project + "/tokens", adminTok, `{"name":"root","role":"admin","ttl":"1h"}`, http.StatusForbidden},
		{"an admin token revokes a token", "DELETE", "/v1/projects/" + project + "/tokens/ci", adminTok, "", http.StatusForbidden},
		{"a token lists another project", "GET", "/v1/projects/" + other + "/workloads", adminTok, "", http.StatusForbidden},
		{"a token creates in another project", "POST", "/v1/projects/" + other + "/workloads", devTok, string(authApp("stray")), http.StatusForbidden},
		{"a token reads another project", "GET", "/v1/projects/" + other, adminTok, "", http.StatusNotFound},
		{"a token mints in another project", "POST", "/v1/projects/" + other + "/tokens", adminTok, `{"name":"root","role":"admin","ttl":"1h"}`, http.StatusNotFound},
		{"a token adds a member to another project", "PUT", "/v1/projects/" + other + "/members/mallory", adminTok, `{"role":"admin"}`, http.StatusNotFound},
		{"a token creates a project", "POST", "/v1/projects", adminTok, `{"name":"attack-tokens-new"}`, http.StatusForbidden},
		{"a token sets quota", "PUT", "/v1/projects/" + project + "/quota/OnDemand", adminTok, `{"cpu":"1000"}`, http.StatusForbidden},
		{"a made-up project token", "GET", "/v1/projects/" + project + "/workloads", "atp_0123456789abcdef0123456789abcdef0123456789abcdef", "", http.StatusUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := projectsRevision(t)
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			status, e := authDo(t, reg.GatewayURL, tc.method, tc.path, tc.token, body)
			if status != tc.status {
				t.Errorf("status %d (%+v), want %d", status, e, tc.status)
			}
			if after := projectsRevision(t); after != before {
				t.Errorf("projects bucket written: revision %d -> %d", before, after)
			}
		})
	}
}
