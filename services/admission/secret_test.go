package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/envelope"
	"atoll.dev/services/admission"
	"atoll.dev/services/quota"
)

// kek makes a key-encryption key in a temporary directory and returns
// admission's Sealer (its public key) and the Keyring that opens what it
// seals (the propagator's side).
func kek(t *testing.T) (*envelope.Sealer, *envelope.Keyring) {
	t.Helper()
	dir := t.TempDir()
	if err := envelope.GenerateKEK(dir, "test-1"); err != nil {
		t.Fatal(err)
	}
	sealer, err := envelope.LoadSealer(filepath.Join(dir, envelope.PublicFile("test-1")))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := envelope.LoadKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	return sealer, ring
}

func open(t *testing.T, ring *envelope.Keyring, s *api.SealedData, aad string) map[string]string {
	t.Helper()
	plain, err := ring.Open(*s, []byte(aad))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	var out map[string]string
	if err := json.Unmarshal(plain, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// secretRegion is an admission service (with sealer, or none) and quota
// on an embedded bus.
func secretRegion(t *testing.T, sealer admission.Sealer) (*bus.Bus, *admission.Service) {
	t.Helper()
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cfg := admission.DefaultConfig()
	cfg.Sealer = sealer
	q := quota.New(b, slog.Default(), quota.Ample())
	a := admission.New(b, slog.Default(), cfg)
	for _, s := range []interface {
		Start(context.Context) error
		Stop() error
	}{q, a} {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop() })
	}
	return b, a
}

func secretDoc(name string, data map[string]string) []byte {
	d, _ := json.Marshal(data)
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"Secret","metadata":{"project":"p","name":%q},"spec":{"data":%s}}`, name, d)
}

// rawHistory is every stored revision of key, as bytes.
func rawHistory(t *testing.T, b *bus.Bus, key string) [][]byte {
	t.Helper()
	kv, err := b.KV(context.Background(), bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	h, err := kv.History(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, e := range h {
		out = append(out, e.Value())
	}
	return out
}

// TestSecretIsSealedBeforeItIsStored: what the workloads bucket holds of a
// Secret, in every revision, contains none of its values; it holds their
// keys, digest and version, and the sealed values open (with the AAD of
// its project and name) to what was written. An update with new values
// is a new version under a new data key; the same values again change
// nothing.
func TestSecretIsSealedBeforeItIsStored(t *testing.T) {
	sealer, ring := kek(t)
	b, a := secretRegion(t, sealer)
	ctx := context.Background()
	v1 := map[string]string{"DB_PASSWORD": "hunter2-plaintext-one", "API_TOKEN": "tok-plaintext-two"}
	alice := admission.Principal{Name: "alice"}

	got, err := a.Submit(ctx, secretDoc("db", v1), alice)
	if err != nil {
		t.Fatal(err)
	}
	spec := got.Spec.(*api.SecretSpec)
	want := api.SecretSpec{Keys: []string{"API_TOKEN", "DB_PASSWORD"}, Digest: admission.SecretDigest("p", "db", v1), Version: 1, UpdatedBy: "alice"}
	if diff := cmp.Diff(want, *spec, cmpopts.IgnoreUnexported(api.SecretSpec{}), cmpopts.IgnoreFields(api.SecretSpec{}, "Sealed", "Updated")); diff != "" {
		t.Errorf("stored spec (-want +got):\n%s", diff)
	}
	if spec.Sealed == nil || spec.Updated.IsZero() {
		t.Fatalf("not sealed or no time: %+v", spec)
	}
	if diff := cmp.Diff(v1, open(t, ring, spec.Sealed, "p/db")); diff != "" {
		t.Errorf("sealed values (-want +got):\n%s", diff)
	}
	firstKey := spec.Sealed.WrappedKey

	// The same document again: the stored Secret, unchanged.
	again, err := a.Submit(ctx, secretDoc("db", v1), admission.Principal{Name: "bob"})
	if err != nil || again.Metadata.Generation != 1 || again.Spec.(*api.SecretSpec).UpdatedBy != "alice" {
		t.Fatalf("resubmit: %v %+v", err, again)
	}
	if _, err := a.Update(ctx, secretDoc("db", v1), admission.Principal{Name: "bob"}); err != nil {
		t.Fatal(err)
	}

	v2 := map[string]string{"DB_PASSWORD": "rotated-plaintext-three"}
	up, err := a.Update(ctx, secretDoc("db", v2), admission.Principal{Name: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	s2 := up.Spec.(*api.SecretSpec)
	if s2.Version != 2 || s2.UpdatedBy != "bob" || up.Metadata.Generation != 2 || !slices2(s2.Keys, "DB_PASSWORD") {
		t.Errorf("after new values: version %d by %q, generation %d, keys %v; want 2, bob, 2, [DB_PASSWORD]", s2.Version, s2.UpdatedBy, up.Metadata.Generation, s2.Keys)
	}
	if bytes.Equal(s2.Sealed.WrappedKey, firstKey) {
		t.Error("the new version reused the first version's data key")
	}
	if diff := cmp.Diff(v2, open(t, ring, s2.Sealed, "p/db")); diff != "" {
		t.Errorf("version 2's sealed values (-want +got):\n%s", diff)
	}
	if _, err := ring.Open(*s2.Sealed, []byte("p/other")); err == nil {
		t.Error("the sealed values open as another Secret's")
	}

	history := rawHistory(t, b, api.Key("p", api.KindSecret, "db"))
	if len(history) != 2 {
		t.Errorf("%d revisions stored, want 2 (the same values again write nothing)", len(history))
	}
	for i, raw := range history {
		for _, v := range []string{"hunter2-plaintext-one", "tok-plaintext-two", "rotated-plaintext-three"} {
			if bytes.Contains(raw, []byte(v)) {
				t.Errorf("revision %d holds the value %q in the clear", i, v)
			}
		}
		if bytes.Contains(raw, []byte(`"data"`)) {
			t.Errorf("revision %d holds spec.data: %s", i, raw)
		}
	}
}

func slices2(got []string, want ...string) bool { return cmp.Equal(got, want) }

// TestSecretRefused: without a key-encryption key a Secret is refused
// (503, saying what the operator must do) and nothing is stored; a
// document that brings its own sealed values, or none, is invalid.
func TestSecretRefused(t *testing.T) {
	sealer, _ := kek(t)
	tests := []struct {
		name   string
		sealer admission.Sealer
		doc    string
		status int
		field  string
	}{
		{"no key-encryption key", nil, string(secretDoc("db", map[string]string{"k": "v"})), 503, ""},
		{"sealed given", sealer, `{"apiVersion":"atoll.dev/v1","kind":"Secret","metadata":{"project":"p","name":"db"},"spec":{"data":{"k":"v"},"sealed":{"keyID":"x","wrappedKey":"AA==","nonce":"AA==","ciphertext":"AA=="}}}`, 422, "spec.sealed"},
		{"no values", sealer, `{"apiVersion":"atoll.dev/v1","kind":"Secret","metadata":{"project":"p","name":"db"},"spec":{}}`, 422, "spec.data"},
		{"bad key", sealer, string(secretDoc("db", map[string]string{"a/b": "v"})), 422, "spec.data.a/b"},
		// Valid (under 1 MiB), but sealed it outgrows a message of the bus.
		{"too large sealed", sealer, string(secretDoc("db", map[string]string{"big": strings.Repeat("x", 900<<10)})), 422, "spec.data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, a := secretRegion(t, tc.sealer)
			_, err := a.Submit(context.Background(), []byte(tc.doc), admission.Principal{Name: "alice"})
			var ae *admission.Error
			if !errors.As(err, &ae) || ae.Status != tc.status {
				t.Fatalf("got %v, want status %d", err, tc.status)
			}
			if tc.field != "" && (len(ae.Body.Fields) == 0 || ae.Body.Fields[0].Field != tc.field) {
				t.Errorf("fields %+v, want %s", ae.Body.Fields, tc.field)
			}
			if tc.status == 503 && !bytes.Contains([]byte(ae.Body.Message), []byte("key-encryption key")) {
				t.Errorf("message %q does not say a key-encryption key is missing", ae.Body.Message)
			}
			if k := keys(t, b); len(k) != 0 {
				t.Errorf("refused Secret stored %v", k)
			}
		})
	}
}

// TestConfigIsAWorkloadOfNoDemand: a Config is admitted as it is, and
// holds a workload of the quota but no resources.
func TestConfigIsAWorkloadOfNoDemand(t *testing.T) {
	_, a := secretRegion(t, nil)
	doc := `{"apiVersion":"atoll.dev/v1","kind":"Config","metadata":{"project":"p","name":"web"},"spec":{"data":{"LOG":"info"},"files":{"app.conf":"x=1\n"}}}`
	w, err := a.Submit(context.Background(), []byte(doc), admission.Principal{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if d := api.DemandOf(w); d.Pods != 0 || d.MilliCPU != 0 || d.MemoryBytes != 0 {
		t.Errorf("a Config demands %+v", d)
	}
	if c := w.Spec.(*api.ConfigSpec); c.Files["app.conf"] != "x=1\n" || c.Data["LOG"] != "info" {
		t.Errorf("stored %+v", c)
	}
}
