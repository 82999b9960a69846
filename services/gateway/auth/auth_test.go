package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	f := TokensFile{Tokens: []TokenEntry{{Subject: "ci", SHA256: Digest(tok), Roles: map[string]Role{"shop": RoleAdmin}, Groups: []string{"robots"}, Expires: time.Now().Add(time.Hour)}}}
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
	if err != nil || id.Subject != "ci" || id.Roles["shop"] != RoleAdmin || !slices.Equal(id.Groups, []string{"robots"}) {
		t.Fatalf("authenticate: %+v %v", id, err)
	}
	if _, err := a.Authenticate("Bearer " + Digest(tok)); !errors.Is(err, ErrUnauthenticated) {
		t.Fatal("the digest itself must not authenticate")
	}
	const exp = `,"expires":"2099-01-01T00:00:00Z"`
	for _, bad := range []string{
		`{"tokens":[{"subject":"x","sha256":"zz"` + exp + `}]}`,
		`{"tokens":[{"subject":"","sha256":"` + Digest("a") + `"` + exp + `}]}`,
		`{"tokens":[{"subject":"x","sha256":"` + Digest("a") + `","roles":{"p":"owner"}` + exp + `}]}`,
		`{"tokens":[{"subject":"x","sha256":"` + Digest("a") + `","extra":1` + exp + `}]}`,
		`{"tokens":[{"subject":"x","sha256":"` + Digest("a") + `"}]}`,
		`{"tokens":[{"subject":"x","sha256":"` + Digest("a") + `","expires":"next year"}]}`,
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
		Roles: map[string]Role{"shop": RoleViewer}, Groups: []string{"eng", "sre"}}
	if _, err := New(Config{JWKSFile: path}); err == nil {
		t.Fatal("a JWKS without issuer and audience was accepted")
	}
	id, err := a.Authenticate("Bearer " + sign(key, "k1", good))
	if err != nil || id.Subject != "alice" || id.Roles["shop"] != RoleViewer || id.PlatformAdmin || !slices.Equal(id.Groups, []string{"eng", "sre"}) {
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
	longLived := good // exp - iat over the maximum
	longLived.IssuedAt = jwt.NewNumericDate(now.Add(-time.Hour))
	longLived.Expiry = jwt.NewNumericDate(now.Add(DefaultMaxJWTLifetime))
	farExp := good // no iat, exp past now + the maximum
	farExp.IssuedAt = nil
	farExp.Expiry = jwt.NewNumericDate(now.Add(DefaultMaxJWTLifetime + time.Hour))
	for name, raw := range map[string]string{
		"expired":        sign(key, "k1", expired),
		"wrong audience": sign(key, "k1", wrongAud),
		"no expiry":      sign(key, "k1", noExp),
		"unknown role":   sign(key, "k1", badRole),
		"lives too long": sign(key, "k1", longLived),
		"exp too far":    sign(key, "k1", farExp),
		"unknown key":    sign(other, "k1", good),
		"unknown key id": sign(other, "k2", good),
		"tampered":       sign(key, "k1", good) + "x",
		"not even a JWT": "a.b.c",
	} {
		_, err := a.Authenticate("Bearer " + raw)
		if !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: accepted (%v)", name, err)
		}
		if r := strings.ToLower(Reason(err)); strings.Contains(r, "jwt") || strings.Contains(r, "square/go-jose") || strings.Contains(r, "json") {
			t.Errorf("%s: the reason %q names internals", name, Reason(err))
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

// An expired API token is refused with a reason that says so; a token
// removed from the tokens file stops working within the reload interval,
// a token added starts working, and a broken file keeps the tokens in use.
func TestTokensFileExpiryAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	write := func(entries ...TokenEntry) {
		t.Helper()
		b, err := json.Marshal(TokensFile{Tokens: entries})
		if err != nil {
			t.Fatal(err)
		}
		// A rename, as a Kubernetes Secret's volume swaps its files.
		if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	keep, keepEntry := Entry(Identity{Subject: "keep"}, now.Add(time.Hour))
	gone, goneEntry := Entry(Identity{Subject: "gone"}, now.Add(time.Hour))
	late, lateEntry := Entry(Identity{Subject: "late"}, now.Add(time.Hour))
	old, oldEntry := Entry(Identity{Subject: "old"}, now.Add(-time.Minute))
	write(keepEntry, goneEntry, oldEntry)
	const interval = 100 * time.Millisecond
	a, err := New(Config{TokensFile: path, ReloadInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	minted, _ := a.Mint(Identity{Subject: "minted"})

	_, err = a.Authenticate("Bearer " + old)
	if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(Reason(err), "token expired at") {
		t.Errorf("expired token: %v, want a refusal saying it expired", err)
	}

	write(keepEntry, lateEntry)
	want := map[string]bool{keep: true, gone: false, late: true, minted: true}
	checkFor(t, 5*time.Second, func() error {
		for tok, ok := range want {
			_, err := a.Authenticate("Bearer " + tok)
			if ok && err != nil {
				return fmt.Errorf("a token in the file: %w", err)
			}
			if !ok && err == nil {
				return errors.New("a token removed from the file still works")
			}
		}
		return nil
	})

	// A broken file is not taken: the tokens in use stay.
	if err := os.WriteFile(path, []byte("tokens: [{subject: x}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * interval) // the next check is due
	for tok, ok := range want {
		if _, err := a.Authenticate("Bearer " + tok); (err == nil) != ok {
			t.Errorf("after a broken file: token valid %v, want %v (%v)", err == nil, ok, err)
		}
	}
	if _, err := New(Config{TokensFile: path, ReloadInterval: time.Minute}); err == nil {
		t.Error("a reload interval over 10s was accepted")
	}
}

// checkFor polls f until it returns nil or d passes.
func checkFor(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
