package api_test

import (
	"regexp"
	"strings"
	"testing"

	"atoll.dev/libs/api"
)

// kvKey is what NATS accepts as a Key-Value key.
var kvKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

func validKVKey(k string) bool {
	return kvKey.MatchString(k) && !strings.HasPrefix(k, ".") && !strings.HasSuffix(k, ".") && !strings.Contains(k, "..")
}

func TestQuotaKeysAreValidAndReversible(t *testing.T) {
	tests := []struct {
		name, project, key, want string
	}{
		{"workload key", "team", "team.app.web", "r.team.team.app.web"},
		{"leading dot", "p", ".lead", "r.p.=2Elead"},
		{"trailing dot", "p", "trail.", "r.p.trail=2E"},
		{"double dot", "p", "a..b", "r.p.a.=2Eb"},
		{"space and equals", "p", "a b=c", "r.p.a=20b=3Dc"},
		{"non-ascii", "p", "ü", "r.p.=C3=BC"},
		{"empty", "p", "", "r.p.="},
		{"dotted project", "a.b", "k", "r.a=2Eb.k"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := api.QuotaReservationKey(tc.project, tc.key)
			if got != tc.want {
				t.Errorf("key %q, want %q", got, tc.want)
			}
			if !validKVKey(got) {
				t.Errorf("%q is not a valid Key-Value key", got)
			}
			back, err := api.UnescapeKeyToken(api.EscapeKeyToken(tc.key))
			if err != nil || back != tc.key {
				t.Errorf("round trip %q -> %q (%v)", tc.key, back, err)
			}
			pk := api.QuotaProjectKey(tc.project)
			if p, ok := api.QuotaProjectOfKey(pk); !ok || p != tc.project || !validKVKey(pk) {
				t.Errorf("project key %q -> %q, %v", pk, p, ok)
			}
		})
	}
}

func TestUnescapeRejectsBrokenEscapes(t *testing.T) {
	for _, s := range []string{"a=", "a=4", "a=ZZ"} {
		if _, err := api.UnescapeKeyToken(s); err == nil {
			t.Errorf("%q unescaped without error", s)
		}
	}
}
