package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

func TestCan(t *testing.T) {
	id := &Identity{Subject: "u", Roles: map[string]Role{"mine": RoleDeveloper, "seen": RoleViewer}}
	admin := &Identity{Subject: "root", PlatformAdmin: true}
	tests := []struct {
		name         string
		id           *Identity
		project      string
		need         Role
		objectScoped bool
		want         Decision
	}{
		{"developer may write", id, "mine", RoleDeveloper, true, Allow},
		{"developer may read", id, "mine", RoleViewer, false, Allow},
		{"developer may not administer", id, "mine", RoleAdmin, false, Deny},
		{"viewer may not write", id, "seen", RoleDeveloper, true, Deny},
		{"no role: a workload looks missing", id, "theirs", RoleViewer, true, Hide},
		{"no role: a collection is forbidden", id, "theirs", RoleViewer, false, Deny},
		{"platform admin may do anything", admin, "theirs", RoleAdmin, true, Allow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.id.Can(tc.project, tc.need, tc.objectScoped); got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestTokensFileKeepsDigestsOnly(t *testing.T) {
	dir := t.TempDir()
	tok := NewToken()
	f := TokensFile{Tokens: []TokenEntry{{Subject: "ci", SHA256: Digest(tok), Roles: map[string]Role{"shop": RoleAdmin}}}}
	b, _ := json.Marshal(f)
	path := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{TokensFile: path})
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Authenticate("Bearer " + tok)
	if err != nil || id.Subject != "ci" || id.Roles["shop"] != RoleAdmin {
		t.Fatalf("authenticate: %+v %v", id, err)
	}
	if _, err := a.Authenticate("Bearer " + Digest(tok)); !errors.Is(err, ErrUnauthenticated) {
		t.Fatal("the digest itself must not authenticate")
	}
	for _, bad := range []string{
		`{"tokens":[{"subject":"x","sha256":"zz"}]}`,
		`{"tokens":[{"subject":"","sha256":"` + Digest("a") + `"}]}`,
		`{"tokens":[{"subject":"x","sha256":"` + Digest("a") + `","roles":{"p":"owner"}}]}`,
		`{"tokens":[{"subject":"x","sha256":"` + Digest("a") + `","extra":1}]}`,
	} {
		_ = os.WriteFile(path, []byte(bad), 0o600)
		if _, err := New(Config{TokensFile: path}); err == nil {
			t.Errorf("tokens file %s accepted", bad)
		}
	}
}

func TestJWT(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwks := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}}
	b, _ := json.Marshal(jwks)
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{JWKSFile: path, Issuer: "https://idp.example", Audience: "atoll"})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k *ecdsa.PrivateKey, kid string, c Claims) string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := jwt.Signed(s).Claims(c).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	now := time.Now()
	good := Claims{Claims: jwt.Claims{Subject: "alice", Issuer: "https://idp.example", Audience: jwt.Audience{"atoll"},
		Expiry: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now)},
		Roles: map[string]Role{"shop": RoleViewer}}
	if _, err := New(Config{JWKSFile: path}); err == nil {
		t.Fatal("a JWKS without issuer and audience was accepted")
	}
	id, err := a.Authenticate("Bearer " + sign(key, "k1", good))
	if err != nil || id.Subject != "alice" || id.Roles["shop"] != RoleViewer || id.PlatformAdmin {
		t.Fatalf("good JWT: %+v %v", id, err)
	}
	expired := good
	expired.Expiry = jwt.NewNumericDate(now.Add(-time.Hour))
	wrongAud := good
	wrongAud.Audience = jwt.Audience{"someone-else"}
	noExp := good
	noExp.Expiry = nil
	badRole := good
	badRole.Roles = map[string]Role{"shop": "owner"}
	for name, raw := range map[string]string{
		"expired":        sign(key, "k1", expired),
		"wrong audience": sign(key, "k1", wrongAud),
		"no expiry":      sign(key, "k1", noExp),
		"unknown role":   sign(key, "k1", badRole),
		"unknown key":    sign(other, "k1", good),
		"unknown key id": sign(other, "k2", good),
		"tampered":       sign(key, "k1", good) + "x",
		"not even a JWT": "a.b.c",
	} {
		if _, err := a.Authenticate("Bearer " + raw); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
}

func TestExampleTokensFile(t *testing.T) {
	a, err := New(Config{TokensFile: "../../../deploy/tokens.example.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Authenticate("Bearer atl_example-change-me")
	if err != nil || !id.PlatformAdmin {
		t.Fatalf("example token: %+v %v", id, err)
	}
}
