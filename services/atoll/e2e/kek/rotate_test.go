package kek_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/envelope"
	"atoll.dev/services/atoll/admin"
	"atoll.dev/services/atoll/e2e"
)

// project holds TestRotateKEK's Secrets; TestRewrapEndpointGuards writes
// into another, so the rotation's counts are its own.
const project = "vault"

func secretDoc(name string, data map[string]string) []byte {
	return secretDocIn(project, name, data)
}

func secretDocIn(project, name string, data map[string]string) []byte {
	d, _ := json.Marshal(data)
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"Secret","metadata":{"project":%q,"name":%q},"spec":{"data":%s}}`, project, name, d)
}

// sealed reads a stored Secret's sealed data and its revision.
func sealed(ctx context.Context, t *testing.T, e *e2e.Env, name string) (api.SealedData, uint64) {
	t.Helper()
	return sealedIn(ctx, t, e, project, name)
}

func sealedIn(ctx context.Context, t *testing.T, e *e2e.Env, project, name string) (api.SealedData, uint64) {
	t.Helper()
	kv, err := e.Region.Bus.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	en, err := kv.Get(ctx, api.Key(project, api.KindSecret, name))
	if err != nil {
		t.Fatalf("read secret %s: %v", name, err)
	}
	w, err := api.Decode(en.Value())
	if err != nil {
		t.Fatal(err)
	}
	spec, ok := w.Spec.(*api.SecretSpec)
	if !ok || spec.Sealed == nil || len(spec.Data) != 0 {
		t.Fatalf("stored secret %s: %+v, want sealed values only", name, w.Spec)
	}
	return *spec.Sealed, en.Revision()
}

// rotate runs `atoll-admin rotate-kek` against the region as the admin.
func rotate(ctx context.Context, e *e2e.Env, args ...string) (string, error) {
	cmd := admin.Root()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"rotate-kek", "--nats", e.Region.Bus.ClientURL(),
		"--creds", e.Region.NATSAuth.CredentialsFile(bus.UserAdmin), "--wait", "2m"}, args...))
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// TestRotateKEK: Secrets sealed under k1; a new KEK k2 put in place as an
// operator does (private key added to the propagator's directory, public
// key replacing admission's, no restart); rotate-kek rewraps every data
// key in batches, keeping nonce and ciphertext; k1's private key is then
// removed and every Secret still opens, with the propagator's keys alone.
func TestRotateKEK(t *testing.T) {
	e := e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	values := map[string]map[string]string{
		"db":  {"user": "web", "password": "s3cret-one"},
		"api": {"token": "tok-two"},
		"tls": {"tls.key": "-----BEGIN KEY-----three"},
		"mq":  {"url": "amqp://four"},
		"s3":  {"secret": "five"},
	}
	for name, data := range values {
		if _, err := e.Client.Submit(ctx, secretDoc(name, data)); err != nil {
			t.Fatalf("submit secret %s: %v", name, err)
		}
	}
	before := map[string]api.SealedData{}
	for name := range values {
		d, _ := sealed(ctx, t, e, name)
		if d.KeyID != "k1" {
			t.Fatalf("secret %s sealed under %q, want the region's k1", name, d.KeyID)
		}
		before[name] = d
	}

	// A KEK the propagator lacks: refused, naming it, nothing changed.
	if out, err := rotate(ctx, e, "--to", "k9"); err == nil || !strings.Contains(err.Error(), `no kek "k9"`) {
		t.Fatalf("rotate-kek --to k9: %v\n%s\nwant an error naming k9", err, out)
	}

	if err := e.Region.AddKEK("k2"); err != nil {
		t.Fatal(err)
	}
	// Admission follows its public key file: a Secret written now is
	// sealed under k2 (within envelope.CheckEvery).
	values["new"] = map[string]string{"v": "six"}
	deadline := time.Now().Add(10 * envelope.CheckEvery)
	for v := 0; ; v++ {
		values["new"]["v"] = fmt.Sprintf("six-%d", v)
		if _, err := e.Client.Apply(ctx, secretDoc("new", values["new"])); err != nil {
			t.Fatalf("apply secret new: %v", err)
		}
		if d, _ := sealed(ctx, t, e, "new"); d.KeyID == "k2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("admission still seals under k1 after its public key file was replaced by k2's")
		}
		time.Sleep(200 * time.Millisecond)
	}

	out, err := rotate(ctx, e, "--to", "k2", "--batch", "2")
	t.Logf("rotate-kek --to k2 --batch 2:\n%s", out)
	if err != nil {
		t.Fatalf("rotate-kek: %v", err)
	}
	for _, want := range []string{"rewrapped 2 (2 in all)", "5 Secrets rewrapped for kek k2; 6 Secrets in all, 6 under k2", "no Secret references any kek but k2"} {
		if !strings.Contains(out, want) {
			t.Errorf("rotate-kek output lacks %q", want)
		}
	}
	for name, b := range before {
		d, _ := sealed(ctx, t, e, name)
		if d.KeyID != "k2" || !bytes.Equal(d.Nonce, b.Nonce) || !bytes.Equal(d.Ciphertext, b.Ciphertext) || bytes.Equal(d.WrappedKey, b.WrappedKey) {
			t.Errorf("secret %s after rotation: kek %q, same nonce %v, same ciphertext %v, new wrapped key %v; want k2, true, true, true",
				name, d.KeyID, bytes.Equal(d.Nonce, b.Nonce), bytes.Equal(d.Ciphertext, b.Ciphertext), !bytes.Equal(d.WrappedKey, b.WrappedKey))
		}
	}

	// k1 is unreferenced: remove it; the propagator's keys open everything.
	if err := e.Region.RemoveKEK("k1"); err != nil {
		t.Fatal(err)
	}
	kr, err := envelope.LoadKeyring(e.Region.KEKDir)
	if err != nil {
		t.Fatal(err)
	}
	if kr.Has("k1") {
		t.Fatal("k1 still in the propagator's directory")
	}
	for name, want := range values {
		d, _ := sealed(ctx, t, e, name)
		plain, err := kr.Open(d, []byte(project+"/"+name))
		if err != nil {
			t.Fatalf("open secret %s with k2 alone: %v", name, err)
		}
		var got map[string]string
		if err := json.Unmarshal(plain, &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("secret %s (-want +got):\n%s", name, diff)
		}
	}

	// Again: nothing left to do.
	out, err = rotate(ctx, e, "--to", "k2")
	if err != nil || !strings.Contains(out, "0 Secrets rewrapped for kek k2; 6 Secrets in all, 6 under k2") {
		t.Fatalf("rotate-kek again: %v\n%s", err, out)
	}
}

// TestRewrapEndpointGuards: admission's rewrap endpoint (which only the
// propagator's NATS user may call, by the contract's grant) stores only a new wrapping of the same ciphertext,
// for the KEK admission seals for, on the revision the caller read.
func TestRewrapEndpointGuards(t *testing.T) {
	e := e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const project, name = "vault-guards", "guarded"
	if _, err := e.Client.Submit(ctx, secretDocIn(project, name, map[string]string{"k": "v"})); err != nil {
		t.Fatal(err)
	}
	d, rev := sealedIn(ctx, t, e, project, name)
	kr, err := envelope.LoadKeyring(e.Region.KEKDir)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := kr.Sealer(d.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	good, err := kr.Rewrap(d, cur)
	if err != nil {
		t.Fatal(err)
	}
	prop, err := e.Region.ConnectAs("atoll-kek-e2e-propagator", bus.UserPropagator)
	if err != nil {
		t.Fatal(err)
	}
	defer prop.Close()
	asPropagator := bus.NewRequester(prop.NC, bus.RequestPolicy{})
	changed := good
	changed.Ciphertext = bytes.Clone(good.Ciphertext)
	changed.Ciphertext[0] ^= 1
	otherKey := good
	otherKey.KeyID = "k-other"
	req := func(s api.SealedData, rev uint64) api.SecretRewrap {
		return api.SecretRewrap{Project: project, Name: name, Revision: rev, Sealed: s}
	}
	tests := []struct {
		name   string
		req    api.SecretRewrap
		status int // 0: stored
	}{
		{"values changed", req(changed, rev), api.StatusUnprocessable},
		{"a kek admission does not seal for", req(otherKey, rev), api.StatusConflict},
		{"stale revision", req(good, rev-1), api.StatusConflict},
		{"missing secret", api.SecretRewrap{Project: project, Name: "nope", Revision: rev, Sealed: good}, api.StatusNotFound},
		{"the rewrapped key", req(good, rev), 0},
		{"the same revision again", req(good, rev), api.StatusConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := bus.AdmissionRewrap.Send(ctx, asPropagator, tt.req)
			var re *bus.RemoteError
			switch {
			case tt.status == 0 && err != nil:
				t.Fatalf("rewrap: %v", err)
			case tt.status != 0 && (!errors.As(err, &re) || re.Code != tt.status):
				t.Fatalf("rewrap: %v, want status %d", err, tt.status)
			}
		})
	}
	if got, _ := sealedIn(ctx, t, e, project, name); !bytes.Equal(got.WrappedKey, good.WrappedKey) {
		t.Error("the stored wrapped key is not the one rewrapped")
	}
}
