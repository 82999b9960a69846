package gateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/services/gateway/auth"
)

// TestWithRolesTakesTheHighest: a request's role in a project is the
// highest its token names and its memberships (its subject's, its
// groups') give; the token's identity is never modified.
func TestWithRolesTakesTheHighest(t *testing.T) {
	m := newMemberships()
	m.set("web", &api.ProjectDoc{Name: "web", Members: []api.Member{
		{Kind: api.MemberUser, Name: "bob", Role: api.RoleDeveloper},
		{Kind: api.MemberGroup, Name: "eng", Role: api.RoleViewer},
		{Kind: api.MemberGroup, Name: "sre", Role: api.RoleAdmin},
		{Kind: api.MemberUser, Name: "eng", Role: api.RoleAdmin}, // a user named like the group
	}})
	m.set("api", &api.ProjectDoc{Name: "api", Members: []api.Member{{Kind: api.MemberGroup, Name: "eng", Role: api.RoleDeveloper}}})
	m.set("gone", &api.ProjectDoc{Name: "gone", Members: []api.Member{{Kind: api.MemberUser, Name: "bob", Role: api.RoleAdmin}}})
	m.set("gone", nil)
	tests := []struct {
		name string
		id   auth.Identity
		want map[string]auth.Role
	}{
		{"a member", auth.Identity{Subject: "bob"}, map[string]auth.Role{"web": auth.RoleDeveloper}},
		{"the token's role is higher", auth.Identity{Subject: "bob", Roles: map[string]auth.Role{"web": auth.RoleAdmin}}, map[string]auth.Role{"web": auth.RoleAdmin}},
		{"the membership's role is higher", auth.Identity{Subject: "bob", Roles: map[string]auth.Role{"web": auth.RoleViewer, "other": auth.RoleViewer}},
			map[string]auth.Role{"web": auth.RoleDeveloper, "other": auth.RoleViewer}},
		{"through groups, the highest", auth.Identity{Subject: "carol", Groups: []string{"eng", "sre"}}, map[string]auth.Role{"web": auth.RoleAdmin, "api": auth.RoleDeveloper}},
		{"a group is not a user", auth.Identity{Subject: "dave", Groups: []string{"eng"}}, map[string]auth.Role{"web": auth.RoleViewer, "api": auth.RoleDeveloper}},
		{"a user is not a group", auth.Identity{Subject: "eng"}, map[string]auth.Role{"web": auth.RoleAdmin}},
		{"no membership", auth.Identity{Subject: "zed"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := cmp.Diff(nil, tc.id.Roles)
			got := m.withRoles(&tc.id)
			if d := cmp.Diff(tc.want, got.Roles); d != "" {
				t.Errorf("roles (-want +got):\n%s", d)
			}
			if after := cmp.Diff(nil, tc.id.Roles); after != before {
				t.Error("the token's identity was modified")
			}
		})
	}
}
