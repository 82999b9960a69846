package envelope

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"atoll.dev/libs/api"
)

// testKEK generates KEK id in dir and returns its Sealer (from the public
// key file).
func testKEK(t *testing.T, dir, id string) *Sealer {
	t.Helper()
	if err := GenerateKEK(dir, id); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSealer(filepath.Join(dir, PublicFile(id)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	s := testKEK(t, dir, "k1")
	kr, err := LoadKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	plain, aad := []byte(`{"password":"hunter2"}`), []byte("web/db-creds")
	sealed, err := s.Seal(plain, aad)
	if err != nil {
		t.Fatal(err)
	}
	if sealed.KeyID != "k1" {
		t.Fatalf("KeyID %q, want k1", sealed.KeyID)
	}
	if bytes.Contains(sealed.Ciphertext, []byte("hunter2")) || bytes.Contains(sealed.WrappedKey, []byte("hunter2")) {
		t.Fatal("sealed data holds the plaintext")
	}
	flip := func(b []byte, i int) []byte {
		b = bytes.Clone(b)
		b[i%len(b)] ^= 1
		return b
	}
	tests := []struct {
		name    string
		mutate  func(d *api.SealedData)
		aad     []byte
		wantErr error // nil: opens to plain
	}{
		{name: "round trip", aad: aad},
		{name: "wrong aad", aad: []byte("web/other"), wantErr: ErrOpen},
		{name: "no aad", wantErr: ErrOpen},
		{name: "ciphertext flipped first byte", aad: aad, mutate: func(d *api.SealedData) { d.Ciphertext = flip(d.Ciphertext, 0) }, wantErr: ErrOpen},
		{name: "ciphertext flipped tag", aad: aad, mutate: func(d *api.SealedData) { d.Ciphertext = flip(d.Ciphertext, len(d.Ciphertext)-1) }, wantErr: ErrOpen},
		{name: "ciphertext truncated", aad: aad, mutate: func(d *api.SealedData) { d.Ciphertext = d.Ciphertext[:len(d.Ciphertext)-1] }, wantErr: ErrOpen},
		{name: "nonce flipped", aad: aad, mutate: func(d *api.SealedData) { d.Nonce = flip(d.Nonce, 3) }, wantErr: ErrOpen},
		{name: "nonce short", aad: aad, mutate: func(d *api.SealedData) { d.Nonce = d.Nonce[:12] }, wantErr: ErrOpen},
		{name: "wrapped key flipped", aad: aad, mutate: func(d *api.SealedData) { d.WrappedKey = flip(d.WrappedKey, 40) }, wantErr: ErrOpen},
		{name: "wrapped key ephemeral key flipped", aad: aad, mutate: func(d *api.SealedData) { d.WrappedKey = flip(d.WrappedKey, 0) }, wantErr: ErrOpen},
		{name: "wrapped key empty", aad: aad, mutate: func(d *api.SealedData) { d.WrappedKey = nil }, wantErr: ErrOpen},
		{name: "unknown key id", aad: aad, mutate: func(d *api.SealedData) { d.KeyID = "k9" }, wantErr: ErrUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := sealed
			if tt.mutate != nil {
				tt.mutate(&d)
			}
			got, err := kr.Open(d, tt.aad)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Open: error %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && !bytes.Equal(got, plain) {
				t.Fatalf("Open = %q, want %q", got, plain)
			}
			if tt.wantErr != nil && got != nil {
				t.Fatalf("Open returned %q with an error", got)
			}
		})
	}
}

func TestOpenUnknownKeyNamesIt(t *testing.T) {
	dir := t.TempDir()
	testKEK(t, dir, "k1")
	other := testKEK(t, t.TempDir(), "k2")
	kr, err := LoadKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := other.Seal([]byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kr.Open(d, nil)
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), `"k2"`) {
		t.Fatalf("Open: error %v, want ErrUnknownKey naming k2", err)
	}
	if kr.Has("k2") || !kr.Has("k1") {
		t.Fatalf("Has(k2)=%v Has(k1)=%v, want false, true", kr.Has("k2"), kr.Has("k1"))
	}
}

func TestSealFreshDataKey(t *testing.T) {
	s := testKEK(t, t.TempDir(), "k1")
	a, err := s.Seal([]byte("same"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Seal([]byte("same"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.WrappedKey, b.WrappedKey) || bytes.Equal(a.Nonce, b.Nonce) || bytes.Equal(a.Ciphertext, b.Ciphertext) {
		t.Fatal("two seals of the same value share a wrapped key, nonce or ciphertext")
	}
}

func TestRewrap(t *testing.T) {
	dir := t.TempDir()
	s1 := testKEK(t, dir, "old")
	s2 := testKEK(t, dir, "new")
	both, err := LoadKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	plain, aad := []byte("v"), []byte("p/s")
	d, err := s1.Seal(plain, aad)
	if err != nil {
		t.Fatal(err)
	}
	r, err := both.Rewrap(d, s2)
	if err != nil {
		t.Fatal(err)
	}
	if r.KeyID != "new" || !bytes.Equal(r.Nonce, d.Nonce) || !bytes.Equal(r.Ciphertext, d.Ciphertext) || bytes.Equal(r.WrappedKey, d.WrappedKey) {
		t.Fatalf("Rewrap = %+v from %+v: want KeyID new, the same nonce and ciphertext, a new wrapped key", r, d)
	}
	if got, err := both.Open(r, aad); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open(rewrapped) = %q, %v", got, err)
	}

	// Without the old key, only the rewrapped data opens.
	if err := os.Remove(filepath.Join(dir, PrivateFile("old"))); err != nil {
		t.Fatal(err)
	}
	newOnly, err := LoadKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newOnly.Open(d, aad); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Open(old) with the new key only: %v, want ErrUnknownKey", err)
	}
	if got, err := newOnly.Open(r, aad); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open(rewrapped) with the new key only = %q, %v", got, err)
	}
	// The new wrapped key does not open under the old KEK's id.
	forged := r
	forged.KeyID = "old"
	if _, err := both.Open(forged, aad); !errors.Is(err, ErrOpen) {
		t.Fatalf("Open(rewrapped named old): %v, want ErrOpen", err)
	}
	// A tampered wrapped key does not rewrap.
	bad := d
	bad.WrappedKey = bytes.Clone(d.WrappedKey)
	bad.WrappedKey[len(bad.WrappedKey)-1] ^= 1
	if _, err := both.Rewrap(bad, s2); !errors.Is(err, ErrOpen) {
		t.Fatalf("Rewrap(tampered): %v, want ErrOpen", err)
	}
}

func TestKeyringPicksUpNewKeys(t *testing.T) {
	dir := t.TempDir()
	testKEK(t, dir, "k1")
	kr, err := LoadKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	s2 := testKEK(t, dir, "k2")
	d, err := s2.Seal([]byte("v"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Open reads the directory again on a miss, at once when the key's
	// file is there (even right after another miss).
	if kr.Has("k9") {
		t.Fatal("Has(k9)")
	}
	if _, err := kr.Open(d, nil); err != nil {
		t.Fatalf("Open after the key was added: %v", err)
	}
	if got, want := strings.Join(kr.IDs(), ","), "k1,k2"; got != want {
		t.Fatalf("IDs = %s, want %s", got, want)
	}
	if err := os.Remove(filepath.Join(dir, PrivateFile("k1"))); err != nil {
		t.Fatal(err)
	}
	if err := kr.Reload(); err != nil {
		t.Fatal(err)
	}
	if kr.Has("k1") {
		t.Fatal("Has(k1) after its file was removed and the dir reloaded")
	}
	// A broken key file is reported and the key it held is kept.
	if err := os.WriteFile(filepath.Join(dir, PrivateFile("k2")), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := kr.Reload(); err == nil || !kr.Has("k2") {
		t.Fatalf("Reload with a broken k2: error %v, Has(k2) %v; want an error and k2 kept", err, kr.Has("k2"))
	}
}

func TestSealerFollowsFile(t *testing.T) {
	dir := t.TempDir()
	testKEK(t, dir, "a")
	testKEK(t, dir, "b")
	kr, err := LoadKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	// admission's --kek-public: a file of any name, replaced by the next KEK's.
	cur := filepath.Join(t.TempDir(), "current.pub")
	copyFile(t, filepath.Join(dir, PublicFile("a")), cur)
	s, err := LoadSealer(cur)
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyID() != "a" {
		t.Fatalf("KeyID = %q, want a", s.KeyID())
	}
	copyFile(t, filepath.Join(dir, PublicFile("b")), cur+".tmp")
	if err := os.Rename(cur+".tmp", cur); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * CheckEvery)
	for s.KeyID() != "b" {
		if time.Now().After(deadline) {
			t.Fatalf("KeyID = %q %v after the file changed, want b", s.KeyID(), 5*CheckEvery)
		}
		time.Sleep(50 * time.Millisecond)
	}
	d, err := s.Seal([]byte("v"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.KeyID != "b" {
		t.Fatalf("sealed for %q, want b", d.KeyID)
	}
	if _, err := kr.Open(d, nil); err != nil {
		t.Fatal(err)
	}
	// A broken file leaves the last good key in use.
	if err := os.WriteFile(cur, []byte("garbage garbage garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(CheckEvery + 100*time.Millisecond)
	if s.KeyID() != "b" {
		t.Fatalf("KeyID = %q after the file broke, want b kept", s.KeyID())
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		path string
	}{
		{"missing", filepath.Join(dir, "kek-none.pub")},
		{"not base64", write("kek-x.pub", "!!!")},
		{"short", write("kek-y.pub", "AAAA")},
		{"bad name", write("public.pub", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")},
		{"bad id", write("kek-Bad_ID.pub", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")},
		{"bad id field", write("any.pub", "Bad_ID AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")},
		{"three fields", write("kek-z.pub", "z AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= extra")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := LoadSealer(tt.path); err == nil {
				t.Fatalf("LoadSealer(%s): no error", tt.path)
			}
		})
	}
	if _, err := LoadKeyring(t.TempDir()); err == nil {
		t.Fatal("LoadKeyring(empty dir): no error")
	}
}

func TestGenerateKEK(t *testing.T) {
	dir := t.TempDir()
	if err := GenerateKEK(dir, "k1"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{PrivateFile("k1"): 0o600, PublicFile("k1"): 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
	if err := GenerateKEK(dir, "k1"); err == nil {
		t.Error("GenerateKEK over an existing KEK: no error")
	}
	// A public key file holding the base64 alone takes its id from its name.
	pub, err := os.ReadFile(filepath.Join(dir, PublicFile("k1")))
	if err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(t.TempDir(), PublicFile("named"))
	if err := os.WriteFile(bare, bytes.TrimPrefix(pub, []byte("k1 ")), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := LoadSealer(bare); err != nil || s.KeyID() != "named" {
		t.Errorf("LoadSealer(bare base64 in kek-named.pub): %v, %v; want id named", s, err)
	}
	for _, id := range []string{"", "UPPER", "-x", "x-", "a.b", strings.Repeat("a", 64)} {
		if err := GenerateKEK(dir, id); err == nil {
			t.Errorf("GenerateKEK(%q): no error", id)
		}
	}
	// The public key file is the one the private key derives.
	kr, err := LoadKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	fromKeyring, err := kr.Sealer("k1")
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := LoadSealer(filepath.Join(dir, PublicFile("k1")))
	if err != nil {
		t.Fatal(err)
	}
	_, a := fromKeyring.current()
	_, b := fromFile.current()
	if a != b {
		t.Fatal("the public key file is not the private key's public key")
	}
}

// FuzzOpen: no sealed data, however mangled, opens to anything but the
// value sealed, nor panics.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	if err := GenerateKEK(dir, "k1"); err != nil {
		f.Fatal(err)
	}
	s, err := LoadSealer(filepath.Join(dir, PublicFile("k1")))
	if err != nil {
		f.Fatal(err)
	}
	kr, err := LoadKeyring(dir)
	if err != nil {
		f.Fatal(err)
	}
	plain, aad := []byte("value"), []byte("p/s")
	d, err := s.Seal(plain, aad)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(d.WrappedKey, d.Nonce, d.Ciphertext, aad)
	f.Add(d.WrappedKey, d.Nonce, d.Ciphertext, []byte("p/t"))
	f.Add([]byte{}, []byte{}, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, wk, nonce, ct, a []byte) {
		got, err := kr.Open(api.SealedData{KeyID: "k1", WrappedKey: wk, Nonce: nonce, Ciphertext: ct}, a)
		if err != nil {
			return
		}
		if !bytes.Equal(got, plain) || !bytes.Equal(a, aad) {
			t.Fatalf("opened %q with aad %q", got, a)
		}
	})
}
