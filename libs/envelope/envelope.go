// Package envelope seals a Secret's values at rest with envelope
// encryption, and opens them again where (and only where) the private
// key-encryption key is mounted.
//
// Each Seal draws a fresh random 32-byte data key, encrypts the values
// with it (XChaCha20-Poly1305, a random 24-byte nonce, the caller's
// additional data: a Secret's "project/name", so a sealed value cannot be
// moved to another Secret), and wraps the data key for a key-encryption
// key (KEK) with a NaCl anonymous sealed box (X25519 and
// XSalsa20-Poly1305). Wrapping needs only the KEK's public key, so the
// writer (admission, a Sealer) holds no secret at all; opening needs the
// private key (the propagator, a Keyring). api.SealedData.KeyID names the
// KEK; rotating to a new KEK rewraps the data keys (Keyring.Rewrap) and
// re-encrypts no value.
//
// Key files: a KEK named id is a pair kek-<id>.key (the X25519 private
// key, the standard base64 of its 32 bytes on one line, mode 0600; the id
// comes from the file's name) and kek-<id>.pub (its public key, 0644: one
// line "<id> <base64>", so the file names its KEK under any name, and a
// writer's public key file can be replaced by the next KEK's in place).
// An id is a DNS label (lower-case letters, digits and '-', at most 63
// characters). GenerateKEK writes a pair.
package envelope

import (
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"fmt"

	"atoll.dev/libs/api"
	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/nacl/box"
)

// KeySize is the size of a data key and of a KEK's public and private keys.
const KeySize = 32

// ErrUnknownKey is returned (wrapped, naming the id) when a keyring holds
// no KEK of a SealedData's KeyID.
var ErrUnknownKey = errors.New("unknown key-encryption key")

// ErrOpen is returned (wrapped) when sealed data fails to open: a wrapped
// key or ciphertext that was changed, or additional data that is not the
// data's.
var ErrOpen = errors.New("sealed data does not open")

// seal encrypts plain under a fresh data key wrapped for the KEK id/pub.
func seal(id string, pub *[KeySize]byte, plain, aad []byte) (api.SealedData, error) {
	var dk [KeySize]byte
	defer clear(dk[:])
	if _, err := rand.Read(dk[:]); err != nil {
		return api.SealedData{}, fmt.Errorf("data key: %w", err)
	}
	aead, err := chacha20poly1305.NewX(dk[:])
	if err != nil {
		return api.SealedData{}, fmt.Errorf("data key: %w", err)
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return api.SealedData{}, fmt.Errorf("nonce: %w", err)
	}
	wrapped, err := boxSeal(dk[:], pub)
	if err != nil {
		return api.SealedData{}, fmt.Errorf("wrap data key for kek %s: %w", id, err)
	}
	return api.SealedData{
		KeyID:      id,
		WrappedKey: wrapped,
		Nonce:      nonce,
		Ciphertext: aead.Seal(nil, nonce, plain, aad),
	}, nil
}

// boxSeal wraps the data key dk for the public key pub.
func boxSeal(dk []byte, pub *[KeySize]byte) ([]byte, error) {
	return box.SealAnonymous(nil, dk, pub, rand.Reader)
}

// kek is one key-encryption key pair.
type kek struct {
	pub, priv [KeySize]byte
}

// newKEK derives the public key of the X25519 private key priv.
func newKEK(priv []byte) (*kek, error) {
	if len(priv) != KeySize {
		return nil, fmt.Errorf("private key of %d bytes, want %d", len(priv), KeySize)
	}
	sk, err := ecdh.X25519().NewPrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	k := &kek{}
	copy(k.priv[:], priv)
	copy(k.pub[:], sk.PublicKey().Bytes())
	return k, nil
}

// unwrap opens d's data key into dk.
func (k *kek) unwrap(d api.SealedData, dk *[KeySize]byte) error {
	out, ok := box.OpenAnonymous(dk[:0], d.WrappedKey, &k.pub, &k.priv)
	if !ok || len(out) != KeySize {
		clear(dk[:])
		return fmt.Errorf("unwrap data key with kek %s: %w", d.KeyID, ErrOpen)
	}
	return nil
}

// open decrypts d with k.
func (k *kek) open(d api.SealedData, aad []byte) ([]byte, error) {
	var dk [KeySize]byte
	defer clear(dk[:])
	if err := k.unwrap(d, &dk); err != nil {
		return nil, err
	}
	aead, err := chacha20poly1305.NewX(dk[:])
	if err != nil {
		return nil, fmt.Errorf("data key: %w", err)
	}
	if len(d.Nonce) != aead.NonceSize() {
		return nil, fmt.Errorf("nonce of %d bytes, want %d: %w", len(d.Nonce), aead.NonceSize(), ErrOpen)
	}
	plain, err := aead.Open(nil, d.Nonce, d.Ciphertext, aad)
	if err != nil {
		return nil, fmt.Errorf("decrypt with kek %s: %w", d.KeyID, ErrOpen)
	}
	return plain, nil
}
