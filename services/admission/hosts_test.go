package admission_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/admission"
)

func exposed(project, name, host string) []byte {
	e := ""
	if host != "" {
		e = fmt.Sprintf(`,"expose":{"host":%q,"port":"http"}`, host)
	}
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},"spec":{"replicas":1%s,"template":{"containers":[{"name":"a","image":"nginx","ports":[{"name":"http","containerPort":80}]}]}}}`, project, name, e)
}

// owner is the App the hosts bucket names for host, "" when none.
func owner(t *testing.T, b *bus.Bus, host string) string {
	t.Helper()
	kv, err := b.KV(context.Background(), bus.BucketHosts)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), host)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var c api.HostClaim
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		t.Fatal(err)
	}
	return c.Owner()
}

// TestHostsAreUniqueInTheRegion: a host is one App's; another App asking
// for it is a 422 naming the owner and nothing is written; a host freed
// by a change or a deletion is claimable again; a stale claim (its owner
// never written) is taken over once past the grace.
func TestHostsAreUniqueInTheRegion(t *testing.T) {
	b := regionWithQuota(t)
	s := startAdmission(t, b, false)
	ctx := context.Background()
	steps := []struct {
		name      string
		do        func() error
		wantErr   string // the 422's reason, "" for success
		host      string
		wantOwner string
	}{
		{"first App claims", func() error {
			_, err := s.Submit(ctx, exposed("p", "a", "web.example.com"), admission.Principal{})
			return err
		},
			"", "web.example.com", "p/a"},
		{"same App again", func() error {
			_, err := s.Submit(ctx, exposed("p", "a", "web.example.com"), admission.Principal{})
			return err
		},
			"", "web.example.com", "p/a"},
		{"another project's App is refused", func() error {
			_, err := s.Submit(ctx, exposed("q", "b", "web.example.com"), admission.Principal{})
			return err
		},
			`spec.expose.host: host "web.example.com" is exposed by App p/a`, "web.example.com", "p/a"},
		{"an App not exposed", func() error { _, err := s.Submit(ctx, exposed("p", "c", ""), admission.Principal{}); return err },
			"", "web.example.com", "p/a"},
		{"an update to a taken host is refused", func() error {
			_, err := s.Update(ctx, exposed("p", "c", "web.example.com"), admission.Principal{})
			return err
		},
			`spec.expose.host: host "web.example.com" is exposed by App p/a`, "web.example.com", "p/a"},
		{"the owner changes host, freeing it", func() error {
			_, err := s.Update(ctx, exposed("p", "a", "new.example.com"), admission.Principal{})
			return err
		},
			"", "web.example.com", ""},
		{"the new host is the owner's", func() error { return nil }, "", "new.example.com", "p/a"},
		{"the freed host is claimable", func() error {
			_, err := s.Submit(ctx, exposed("q", "b", "web.example.com"), admission.Principal{})
			return err
		},
			"", "web.example.com", "q/b"},
		{"deleting the owner frees its host", func() error { return s.Delete(ctx, "q", api.KindApp, "b") },
			"", "web.example.com", ""},
		{"unexposing frees the host", func() error { _, err := s.Update(ctx, exposed("p", "a", ""), admission.Principal{}); return err },
			"", "new.example.com", ""},
	}
	for _, st := range steps {
		err := st.do()
		var got string
		var ae *admission.Error
		switch {
		case errors.As(err, &ae):
			if ae.Status != api.StatusUnprocessable {
				t.Fatalf("%s: status %d: %v", st.name, ae.Status, ae.Body)
			}
			got = ae.Body.Fields.Error()
		case err != nil:
			t.Fatalf("%s: %v", st.name, err)
		}
		if want := st.wantErr; want != "" {
			want = "invalid workload: " + want
			if got != want {
				t.Errorf("%s: error %q, want %q", st.name, got, want)
			}
		} else if got != "" {
			t.Errorf("%s: error %q", st.name, got)
		}
		if o := owner(t, b, st.host); o != st.wantOwner {
			t.Errorf("%s: %s is claimed by %q, want %q", st.name, st.host, o, st.wantOwner)
		}
	}
	if k := keys(t, b); len(k) != 2 {
		t.Errorf("workloads %v, want p/a and p/c only", k)
	}
}

// TestStaleHostClaimIsTakenOver: a claim whose owner was never written
// (a replica died between the claim and the App) holds the host only for
// the grace, then the next App takes it over.
func TestStaleHostClaimIsTakenOver(t *testing.T) {
	b := regionWithQuota(t)
	s := startAdmission(t, b, false)
	ctx := context.Background()
	kv, err := b.KV(ctx, bus.BucketHosts)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(api.HostClaim{Project: "p", Name: "crashed"})
	if _, err := kv.Create(ctx, "web.example.com", body); err != nil {
		t.Fatal(err)
	}
	var ae *admission.Error
	if _, err := s.Submit(ctx, exposed("q", "b", "web.example.com"), admission.Principal{}); !errors.As(err, &ae) || ae.Status != api.StatusUnprocessable {
		t.Fatalf("within the grace: %v, want 422", err)
	}
	admission.SetHostClaimGrace(s, 0)
	if _, err := s.Submit(ctx, exposed("q", "b", "web.example.com"), admission.Principal{}); err != nil {
		t.Fatalf("past the grace: %v", err)
	}
	if o := owner(t, b, "web.example.com"); o != "q/b" {
		t.Errorf("claimed by %q, want q/b", o)
	}
}
