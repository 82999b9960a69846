package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// internals are what no answer may carry: encoding/json's Go type names,
// NATS client errors, JWT library errors, strconv's.
var internals = []string{"go struct", "go value", "nats:", "nats", "jwt", "json:", "jose", "strconv", "unmarshal"}

// No answer names Go types, NATS or JWT internals, whatever the body or
// token; API answers are never sniffed or stored. The gateway has no
// region services behind it, so what reaches the bus finds no responder.
func TestNoInternalsInAnswers(t *testing.T) {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	expiredTok, expired := auth.Entry(auth.Identity{Subject: "gone", PlatformAdmin: true}, time.Now().Add(-time.Hour))
	tokens, _ := json.Marshal(auth.TokensFile{Tokens: []auth.TokenEntry{expired}})
	for name, b := range map[string][]byte{"jwks.json": jwks, "tokens.yaml": tokens} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, err := auth.New(auth.Config{TokensFile: filepath.Join(dir, "tokens.yaml"), JWKSFile: filepath.Join(dir, "jwks.json"),
		Issuer: "https://idp.example", Audience: "atoll", MaxJWTLifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGateway(t, gateway.Config{Authenticator: a})

	sign := func(k *ecdsa.PrivateKey, lifetime time.Duration) string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		raw, err := jwt.Signed(s).Claims(auth.Claims{Claims: jwt.Claims{Subject: "alice", Issuer: "https://idp.example",
			Audience: jwt.Audience{"atoll"}, IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(lifetime))}}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}

	tests := []struct {
		name         string
		method, path string
		token        string // g.Admin when ""
		body         string
		status       int
		says         string // a part of the message
	}{
		{"a string for an integer", "PUT", "/v1/projects/p/quota/OnDemand", "", `{"milliCPU":"lots"}`, 400, "field milliCPU"},
		{"an integer for a string", "POST", "/v1/projects/p/workloads", "", `{"kind":"App","metadata":{"name":7}}`, 400, "metadata.name"},
		{"a string for replicas", "POST", "/v1/projects/p/workloads", "", `{"kind":"App","metadata":{"name":"w"},"spec":{"replicas":"three"}}`, 400, "replicas"},
		{"broken JSON", "PUT", "/v1/projects/p/quota/OnDemand", "", `{"milliCPU":`, 400, "ends early"},
		{"unknown field", "PUT", "/v1/projects/p/quota/OnDemand", "", `{"cpus":1}`, 400, "cpus"},
		{"trailing data", "PUT", "/v1/projects/p/quota/OnDemand", "", `{"milliCPU":1} {}`, 400, "trailing"},
		{"a query parameter of the wrong type", "GET", "/v1/projects/p/workloads?limit=many", "", "", 400, "parameter limit"},
		{"no region service answers", "PUT", "/v1/projects/p/quota/OnDemand", "", `{"milliCPU":1}`, 503, "did not answer"},
		{"no admission", "POST", "/v1/projects/p/workloads", "", `{"kind":"Pod","metadata":{"name":"w"},"spec":{"template":{"containers":[{"name":"c","image":"nginx"}]}}}`, 503, "did not answer"},
		{"an expired API token", "GET", "/v1/whoami", expiredTok, "", 401, "token expired at"},
		{"an unknown API token", "GET", "/v1/whoami", "atl_nobody", "", 401, "unknown token"},
		{"a malformed JWT", "GET", "/v1/whoami", "a.b.c", "", 401, "invalid token"},
		{"a JWT of another key", "GET", "/v1/whoami", sign(other, time.Minute), "", 401, "invalid token"},
		{"a tampered JWT", "GET", "/v1/whoami", sign(key, time.Minute) + "x", "", 401, "invalid token"},
		{"an expired JWT", "GET", "/v1/whoami", sign(key, -time.Hour), "", 401, "token expired"},
		{"a JWT living too long", "GET", "/v1/whoami", sign(key, 2*time.Hour), "", 401, "lifetime over"},
		{"a good JWT", "GET", "/v1/whoami", sign(key, time.Minute), "", 200, "alice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.token
			if tok == "" {
				tok = g.Admin
			}
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			resp, b := g.do(t, tc.method, tc.path, tok, body)
			got := string(b)
			if resp.StatusCode != tc.status || !strings.Contains(got, tc.says) {
				t.Errorf("status %d, body %s; want %d saying %q", resp.StatusCode, got, tc.status, tc.says)
			}
			for _, bad := range internals {
				if strings.Contains(strings.ToLower(got), bad) {
					t.Errorf("the answer names %q: %s", bad, got)
				}
			}
			if h := resp.Header; h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" {
				t.Errorf("headers X-Content-Type-Options %q, Cache-Control %q; want nosniff, no-store", h.Get("X-Content-Type-Options"), h.Get("Cache-Control"))
			}
		})
	}
}
