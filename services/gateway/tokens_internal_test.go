package gateway

import (
	"testing"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/services/gateway/auth"
)

// TestTokenIndex: a token is found by its secret until its key is
// deleted or replaced, and its use is due for a report at most every
// api.TokenUsedEvery, its own last-use update included.
func TestTokenIndex(t *testing.T) {
	x := newTokenIndex()
	secret := api.ProjectTokenPrefix + "one"
	tok := &api.ProjectToken{Project: "web", Name: "ci", Role: "developer", SHA256: auth.Digest(secret)}
	key := api.TokenKey("web", "ci")
	x.set(key, tok)
	got, d, ok := x.lookup(secret)
	if !ok || got != tok {
		t.Fatalf("lookup of a stored token: %v %v", got, ok)
	}
	if _, _, ok := x.lookup(api.ProjectTokenPrefix + "two"); ok {
		t.Error("lookup of another secret found a token")
	}
	now := time.Now()
	steps := []struct {
		name string
		at   time.Time
		do   func()
		want bool
	}{
		{"first use", now, nil, true},
		{"again at once", now.Add(time.Second), nil, false},
		{"after its own last-use update", now.Add(2 * time.Second), func() {
			cp := *tok
			cp.LastUsed = now
			x.set(key, &cp)
		}, false},
		{"a minute later", now.Add(api.TokenUsedEvery), nil, true},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		if got := x.dueReport(d, s.at); got != s.want {
			t.Errorf("%s: due %v, want %v", s.name, got, s.want)
		}
	}
	if got := x.list("web"); len(got) != 1 || got[0].Name != "ci" {
		t.Errorf("list: %v", got)
	}
	x.set(key, nil)
	if _, _, ok := x.lookup(secret); ok {
		t.Error("a revoked token is found")
	}
	if got := x.list("web"); len(got) != 0 {
		t.Errorf("list after revocation: %v", got)
	}
}
