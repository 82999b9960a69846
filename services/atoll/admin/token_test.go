package admin

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"atoll.dev/services/gateway/auth"
)

// A token created with atoll-admin works at the gateway with its roles
// and an expiry; revoked, it stops working; bad flags are refused.
func TestTokenCreateAndRevoke(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	run := func(args ...string) (string, error) {
		root := Root()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(append(args, "--tokens", path))
		err := root.Execute()
		return strings.TrimSpace(out.String()), err
	}
	ci, err := run("token", "create", "--subject", "ci", "--role", "shop=developer", "--ttl", "1h")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := run("token", "create", "--subject", "ops", "--platform-admin")
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{TokensFile: path})
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Authenticate("Bearer " + ci)
	if err != nil || id.Subject != "ci" || id.Roles["shop"] != auth.RoleDeveloper || id.PlatformAdmin {
		t.Fatalf("created token: %+v, %v", id, err)
	}
	f, err := auth.ReadTokensFile(path)
	if err != nil || len(f.Tokens) != 2 || f.Tokens[0].Expires.IsZero() {
		t.Fatalf("tokens file: %+v, %v", f, err)
	}

	if _, err := run("token", "revoke", "--subject", "ci"); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate("Bearer " + ci); err == nil {
		t.Error("a revoked token still works")
	}
	if _, err := a.Authenticate("Bearer " + ops); err != nil {
		t.Errorf("the other token: %v", err)
	}

	for _, args := range [][]string{
		{"token", "create"},
		{"token", "create", "--subject", "x", "--role", "shop=owner"},
		{"token", "create", "--subject", "x", "--role", "shop"},
		{"token", "create", "--subject", "x", "--ttl", "0s"},
		{"token", "revoke", "--subject", "nobody"},
		{"token", "revoke"},
	} {
		if _, err := run(args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
