package envelope

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File name affixes of a KEK's key files: kek-<id>.key and kek-<id>.pub.
const (
	filePrefix = "kek-"
	PrivateExt = ".key"
	PublicExt  = ".pub"
)

// PrivateFile is the name of KEK id's private key file.
func PrivateFile(id string) string { return filePrefix + id + PrivateExt }

// PublicFile is the name of KEK id's public key file.
func PublicFile(id string) string { return filePrefix + id + PublicExt }

// ValidateID checks a KEK id: a DNS label (lower-case letters, digits and
// '-', starting and ending with a letter or digit, at most 63 characters).
func ValidateID(id string) error {
	if id == "" || len(id) > 63 {
		return fmt.Errorf("kek id %q: 1 to 63 characters", id)
	}
	for i, r := range id {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (r != '-' || i == 0 || i == len(id)-1) {
			return fmt.Errorf("kek id %q: lower-case letters, digits and '-' inside", id)
		}
	}
	return nil
}

// idFromFile is the KEK id of a key file name with extension ext, or ""
// when the name is not one.
func idFromFile(name, ext string) string {
	id, ok := strings.CutPrefix(name, filePrefix)
	if !ok {
		return ""
	}
	if id, ok = strings.CutSuffix(id, ext); !ok || ValidateID(id) != nil {
		return ""
	}
	return id
}

// readKey reads a key file: the standard base64 of 32 bytes.
func readKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: a key file of the directory the operator named
	if err != nil {
		return nil, err
	}
	return decodeKey(path, string(bytes.TrimSpace(b)))
}

func decodeKey(path, s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s: not base64: %w", path, err)
	}
	if len(k) != KeySize {
		return nil, fmt.Errorf("%s: %d bytes, want %d", path, len(k), KeySize)
	}
	return k, nil
}

// readPublic reads a public key file: "<id> <base64>", or the base64 alone
// when the file's name is kek-<id>.pub.
func readPublic(path string) (string, []byte, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the public key file the operator named
	if err != nil {
		return "", nil, err
	}
	f := strings.Fields(string(b))
	switch len(f) {
	case 1:
		id := idFromFile(filepath.Base(path), PublicExt)
		if id == "" {
			return "", nil, fmt.Errorf("%s: no kek id: neither \"<id> <key>\" nor a name kek-<id>%s", path, PublicExt)
		}
		k, err := decodeKey(path, f[0])
		return id, k, err
	case 2:
		if err := ValidateID(f[0]); err != nil {
			return "", nil, fmt.Errorf("%s: %w", path, err)
		}
		k, err := decodeKey(path, f[1])
		return f[0], k, err
	default:
		return "", nil, fmt.Errorf("%s: want \"<id> <base64 key>\"", path)
	}
}

// GenerateKEK writes a new KEK named id into dir: kek-<id>.key (the
// private key, mode 0600) and kek-<id>.pub (the public key, 0644). It
// refuses to replace an existing file: a KEK that sealed data must not
// be lost.
func GenerateKEK(dir, id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	var sk [KeySize]byte // any 32 bytes are an X25519 private key
	if _, err := rand.Read(sk[:]); err != nil {
		return fmt.Errorf("generate kek %s: %w", id, err)
	}
	k, err := newKEK(sk[:])
	clear(sk[:])
	if err != nil {
		return fmt.Errorf("generate kek %s: %w", id, err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("generate kek %s: %w", id, err)
	}
	priv, pub := filepath.Join(dir, PrivateFile(id)), filepath.Join(dir, PublicFile(id))
	for _, f := range []string{priv, pub} {
		if _, err := os.Lstat(f); err == nil {
			return fmt.Errorf("generate kek %s: %s exists", id, f)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("generate kek %s: %w", id, err)
		}
	}
	if err := writeFile(priv, base64.StdEncoding.EncodeToString(k.priv[:])+"\n", 0o600); err != nil {
		return fmt.Errorf("generate kek %s: %w", id, err)
	}
	if err := writeFile(pub, id+" "+base64.StdEncoding.EncodeToString(k.pub[:])+"\n", 0o644); err != nil {
		return fmt.Errorf("generate kek %s: %w", id, err)
	}
	return nil
}

// writeFile writes a key file whole (a temporary file renamed into place),
// so a reader never sees half of it.
func writeFile(path, content string, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close() //nolint:errcheck,gosec // the chmod error is the one reported
		return err
	}
	if _, err := tmp.WriteString(content); err != nil {
		tmp.Close() //nolint:errcheck,gosec // the write error is the one reported
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
