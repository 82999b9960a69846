package admission_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// as is the header the gateway sets for a caller.
func as(name string) nats.Header {
	return nats.Header{bus.HeaderPrincipal: {name}}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// step is one request of the projects' story and what it must answer.
type step struct {
	name   string
	ep     bus.Descriptor
	req    any
	caller string
	// status is the error status wanted ("" for success), field the field
	// it must name, code its code.
	status, field, code string
}

func TestProjectsAndMembers(t *testing.T) {
	b := region(t)
	app := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"full","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`
	steps := []step{
		{"create web for alice", bus.ProjectCreate, api.ProjectCreate{Name: "web", Owner: "alice", Labels: map[string]string{"team": "web"}}, "root", "", "", ""},
		{"name taken", bus.ProjectCreate, api.ProjectCreate{Name: "web"}, "root", "409", "name", "AlreadyExists"},
		{"reserved name", bus.ProjectCreate, api.ProjectCreate{Name: "kube-x"}, "root", "422", "name", "Invalid"},
		{"too long a name", bus.ProjectCreate, api.ProjectCreate{Name: "a123456789012345678901234567890123456789012345678901234567890"}, "root", "422", "name", "Invalid"},
		{"bad label", bus.ProjectCreate, api.ProjectCreate{Name: "ok", Labels: map[string]string{"team": "no spaces"}}, "root", "422", "labels.team", "Invalid"},
		{"bob joins as developer", bus.MemberSet, api.MemberSet{Project: "web", Kind: api.MemberUser, Name: "bob", Role: api.RoleDeveloper}, "alice", "", "", ""},
		{"a group joins as viewer", bus.MemberSet, api.MemberSet{Project: "web", Kind: api.MemberGroup, Name: "eng", Role: api.RoleViewer}, "alice", "", "", ""},
		{"unknown role", bus.MemberSet, api.MemberSet{Project: "web", Kind: api.MemberUser, Name: "bob", Role: "owner"}, "alice", "422", "role", "Invalid"},
		{"unknown kind", bus.MemberSet, api.MemberSet{Project: "web", Kind: "robot", Name: "bob", Role: api.RoleViewer}, "alice", "422", "kind", "Invalid"},
		{"members of no project", bus.MemberSet, api.MemberSet{Project: "nope", Kind: api.MemberUser, Name: "bob", Role: api.RoleViewer}, "alice", "404", "", "NotFound"},
		{"the last admin stays", bus.MemberRemove, api.MemberRemove{Project: "web", Kind: api.MemberUser, Name: "alice"}, "alice", "409", "", "LastAdmin"},
		{"the last admin is not demoted", bus.MemberSet, api.MemberSet{Project: "web", Kind: api.MemberUser, Name: "alice", Role: api.RoleViewer}, "alice", "409", "", "LastAdmin"},
		{"bob becomes admin", bus.MemberSet, api.MemberSet{Project: "web", Kind: api.MemberUser, Name: "bob", Role: api.RoleAdmin}, "alice", "", "", ""},
		{"then alice may go", bus.MemberRemove, api.MemberRemove{Project: "web", Kind: api.MemberUser, Name: "alice"}, "bob", "", "", ""},
		{"removing a non-member", bus.MemberRemove, api.MemberRemove{Project: "web", Kind: api.MemberUser, Name: "alice"}, "bob", "404", "", "NotFound"},
		{"self-service 1", bus.ProjectCreate, api.ProjectCreate{Name: "c1", MaxPerCreator: 2}, "carol", "", "", ""},
		{"self-service 2", bus.ProjectCreate, api.ProjectCreate{Name: "c2", MaxPerCreator: 2}, "carol", "", "", ""},
		{"self-service over the limit", bus.ProjectCreate, api.ProjectCreate{Name: "c3", MaxPerCreator: 2}, "carol", "409", "", "ProjectLimitReached"},
		{"self-service for another owner", bus.ProjectCreate, api.ProjectCreate{Name: "c4", Owner: "dave", MaxPerCreator: 2}, "carol", "403", "owner", "Forbidden"},
		{"a deletion frees a place", bus.ProjectDelete, api.ProjectRef{Project: "c1"}, "carol", "", "", ""},
		{"self-service again", bus.ProjectCreate, api.ProjectCreate{Name: "c3", MaxPerCreator: 2}, "carol", "", "", ""},
		{"another user's own limit", bus.ProjectCreate, api.ProjectCreate{Name: "d1", MaxPerCreator: 2}, "dave", "", "", ""},
		{"project with a workload", bus.ProjectCreate, api.ProjectCreate{Name: "full"}, "root", "", "", ""},
		{"deleting a missing project", bus.ProjectDelete, api.ProjectRef{Project: "gone"}, "root", "404", "", "NotFound"},
	}
	run := func(t *testing.T, s step) {
		t.Helper()
		reply, eb := call(t, b, s.ep, mustJSON(s.req), as(s.caller))
		got := reply.Header.Get("Nats-Service-Error-Code")
		if got != s.status {
			t.Fatalf("status %q (%+v), want %q", got, eb, s.status)
		}
		if eb == nil {
			return
		}
		if eb.Code != s.code {
			t.Errorf("code %s, want %s", eb.Code, s.code)
		}
		if s.field != "" && (len(eb.Fields) != 1 || eb.Fields[0].Field != s.field) {
			t.Errorf("fields %+v, want one on %s", eb.Fields, s.field)
		}
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { run(t, s) })
	}
	if _, eb := call(t, b, bus.AdmissionSubmit, []byte(app), nil); eb != nil {
		t.Fatalf("submit: %+v", eb)
	}
	t.Run("not while it holds workloads", func(t *testing.T) {
		run(t, step{"", bus.ProjectDelete, api.ProjectRef{Project: "full"}, "root", "409", "", "NotEmpty"})
	})
	legacy := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"legacy","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`
	if _, eb := call(t, b, bus.AdmissionSubmit, []byte(legacy), nil); eb != nil {
		t.Fatalf("submit: %+v", eb)
	}
	t.Run("no self-service claim of a project in use", func(t *testing.T) {
		run(t, step{"", bus.ProjectCreate, api.ProjectCreate{Name: "legacy", MaxPerCreator: 5}, "mallory", "409", "name", "AlreadyExists"})
	})
	t.Run("a platform admin registers a project in use", func(t *testing.T) {
		run(t, step{"", bus.ProjectCreate, api.ProjectCreate{Name: "legacy", Owner: "alice"}, "root", "", "", ""})
	})

	kv, err := b.KV(context.Background(), bus.BucketProjects)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), api.ProjectKey("web"))
	if err != nil {
		t.Fatal(err)
	}
	var web api.ProjectDoc
	if err := json.Unmarshal(e.Value(), &web); err != nil {
		t.Fatal(err)
	}
	type m struct{ Kind, Name, Role string }
	var got []m
	for _, x := range web.Members {
		got = append(got, m{x.Kind, x.Name, x.Role})
	}
	want := []m{{api.MemberGroup, "eng", api.RoleViewer}, {api.MemberUser, "bob", api.RoleAdmin}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("web's members (-want +got):\n%s", d)
	}
	if web.Owner != "alice" || web.CreatedBy != "root" || web.SelfService {
		t.Errorf("web: owner %s, created by %s, self-service %v; want alice, root, false", web.Owner, web.CreatedBy, web.SelfService)
	}
	if _, err := kv.Get(context.Background(), api.ProjectKey("c1")); err == nil {
		t.Error("deleted project c1 is still stored")
	}
}
