package api_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

func TestProjectCreateValidate(t *testing.T) {
	tests := []struct {
		name   string
		create api.ProjectCreate
		fields []string
	}{
		{"valid", api.ProjectCreate{Name: "web", DisplayName: "Web team", Owner: "alice@example.com", Labels: map[string]string{"team": "web", "cost-center": "cc-42"}}, nil},
		{"no name", api.ProjectCreate{}, []string{"name"}},
		{"reserved name", api.ProjectCreate{Name: "atoll-x"}, []string{"name"}},
		{"58 characters", api.ProjectCreate{Name: strings.Repeat("a", 58)}, []string{"name"}},
		{"a control character", api.ProjectCreate{Name: "web", DisplayName: "a\x00b", Description: "line\nline\ttab"}, []string{"displayName"}},
		{"an owner with spaces around", api.ProjectCreate{Name: "web", Owner: " alice"}, []string{"owner"}},
		{"a bad label value", api.ProjectCreate{Name: "web", Labels: map[string]string{"team": "a b"}}, []string{"labels.team"}},
		{"everything wrong", api.ProjectCreate{Name: "Web", Description: strings.Repeat("d", 1001), Labels: map[string]string{"-x": "y"}}, []string{"name", "description", "labels"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range tc.create.Validate() {
				got = append(got, f.Field)
			}
			if d := cmp.Diff(tc.fields, got); d != "" {
				t.Errorf("fields (-want +got):\n%s", d)
			}
		})
	}
}

func TestMemberValidate(t *testing.T) {
	tests := []struct {
		name   string
		set    api.MemberSet
		fields []string
	}{
		{"a user", api.MemberSet{Kind: api.MemberUser, Name: "bob", Role: api.RoleDeveloper}, nil},
		{"a group with a path-like name", api.MemberSet{Kind: api.MemberGroup, Name: "org/eng", Role: api.RoleViewer}, nil},
		{"no kind, no name, no role", api.MemberSet{}, []string{"kind", "name", "role"}},
		{"an unknown role", api.MemberSet{Kind: api.MemberUser, Name: "bob", Role: "owner"}, []string{"role"}},
		{"a name too long", api.MemberSet{Kind: api.MemberUser, Name: strings.Repeat("n", 254), Role: api.RoleAdmin}, []string{"name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range tc.set.Validate() {
				got = append(got, f.Field)
			}
			if d := cmp.Diff(tc.fields, got); d != "" {
				t.Errorf("fields (-want +got):\n%s", d)
			}
		})
	}
}

func TestProjectMembers(t *testing.T) {
	d := api.ProjectDoc{}
	d.SetMember(api.Member{Kind: api.MemberUser, Name: "zed", Role: api.RoleAdmin})
	d.SetMember(api.Member{Kind: api.MemberGroup, Name: "eng", Role: api.RoleViewer})
	d.SetMember(api.Member{Kind: api.MemberUser, Name: "amy", Role: api.RoleViewer})
	d.SetMember(api.Member{Kind: api.MemberUser, Name: "amy", Role: api.RoleAdmin})
	var got []string
	for _, m := range d.Members {
		got = append(got, m.Kind+" "+m.Name+" "+m.Role)
	}
	if diff := cmp.Diff([]string{"group eng viewer", "user amy admin", "user zed admin"}, got); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	if n := d.Admins(); n != 2 {
		t.Errorf("admins %d, want 2", n)
	}
	if !d.RemoveMember(api.MemberUser, "zed") || d.RemoveMember(api.MemberUser, "zed") || d.Admins() != 1 {
		t.Errorf("remove: %+v", d.Members)
	}
	if _, ok := d.Member(api.MemberUser, "eng"); ok {
		t.Error("a group found as a user")
	}
}
