package attack

// Projects and their members: a tenant tries to create a project where
// only platform admins may, to raise its own role, to manage another
// project's members, to delete a project it is only a developer of, and
// a service other than admission tries to write the projects bucket. Each
// gets the documented refusal and the projects bucket is unchanged.

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
)

// projectsRevision is the projects bucket's last revision.
func projectsRevision(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := reg.Bus.KV(ctx, bus.BucketProjects)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
}

func TestAttackProjectsAndMembers(t *testing.T) {
	e2e.Need(t)
	const project, other = "attack-members", "attack-members-other"
	for _, p := range []string{project, other} {
		status, e := authDo(t, reg.GatewayURL, "POST", "/v1/projects", reg.AdminToken, []byte(`{"name":"`+p+`","owner":"attack-owner"}`))
		if status != http.StatusCreated {
			t.Fatalf("create %s: %d %+v", p, status, e)
		}
	}
	// A developer by its token, and by membership; a stranger.
	dev := reg.Token("attack-dev", false, map[string]string{project: "developer"})
	stranger := reg.Token("attack-stranger", false, nil)
	tests := []struct {
		name, method, path, token, body string
		status                          int
	}{
		{"a tenant creates a project (no self-service)", "POST", "/v1/projects", dev, `{"name":"attack-mine"}`, http.StatusForbidden},
		{"a developer makes itself admin", "PUT", "/v1/projects/" + project + "/members/attack-dev", dev, `{"role":"admin"}`, http.StatusForbidden},
		{"a developer adds a group it is in", "PUT", "/v1/projects/" + project + "/members/everyone", dev, `{"kind":"group","role":"admin"}`, http.StatusForbidden},
		{"a developer removes the owner", "DELETE", "/v1/projects/" + project + "/members/attack-owner", dev, "", http.StatusForbidden},
		{"a developer deletes the project", "DELETE", "/v1/projects/" + project, dev, "", http.StatusForbidden},
		{"a stranger adds itself", "PUT", "/v1/projects/" + other + "/members/attack-stranger", stranger, `{"role":"admin"}`, http.StatusNotFound},
		{"a stranger reads a project", "GET", "/v1/projects/" + other, stranger, "", http.StatusNotFound},
		{"a developer reaches another project", "PUT", "/v1/projects/" + other + "/members/attack-dev", dev, `{"role":"viewer"}`, http.StatusNotFound},
		{"a member name with a path in it", "PUT", "/v1/projects/" + project + "/members/" + url.PathEscape("../"+other+"/members/x"), dev, `{"role":"viewer"}`, http.StatusForbidden},
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

// Only admission writes the projects bucket: the gateway's user, which
// reads it for every request's roles, may not write a membership there.
func TestNATSOnlyAdmissionWritesProjects(t *testing.T) {
	e2e.Need(t)
	before := projectsRevision(t)
	for _, user := range []string{bus.UserGateway, bus.UserQuota} {
		t.Run(user, func(t *testing.T) {
			a := connectAttacker(t, user)
			subject := "$KV." + bus.BucketProjects + "." + api.ProjectKey("attack-taken")
			if err := a.nc.Publish(subject, []byte(`{"name":"attack-taken","members":[{"kind":"user","name":"mallory","role":"admin"}]}`)); err != nil {
				t.Fatal(err)
			}
			if err := a.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			a.violated(t, subject)
		})
	}
	if after := projectsRevision(t); after != before {
		t.Errorf("projects bucket written: revision %d -> %d", before, after)
	}
}
