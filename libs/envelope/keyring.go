package envelope

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"atoll.dev/libs/api"
)

// Keyring holds the private KEKs of a directory: every kek-<id>.key in
// it. It opens sealed data and rewraps data keys for another KEK. Keys
// added to the directory are picked up without a restart: Reload reads
// the directory again, and Open, Rewrap, Has and Sealer do it themselves
// when asked for an id the keyring lacks (at once when its file is there,
// otherwise at most once per CheckEvery).
type Keyring struct {
	dir string

	mu       sync.RWMutex
	keys     map[string]*kek // by id; mu must be held
	reloaded time.Time       // when the directory was last read; mu must be held
}

// LoadKeyring reads every kek-<id>.key in dir; the public keys derive
// from them. A directory without one is an error.
func LoadKeyring(dir string) (*Keyring, error) {
	k := &Keyring{dir: dir, keys: map[string]*kek{}}
	if err := k.Reload(); err != nil {
		return nil, err
	}
	if len(k.keys) == 0 {
		return nil, fmt.Errorf("kek dir %s: no %s<id>%s file", dir, filePrefix, PrivateExt)
	}
	return k, nil
}

// Reload reads the directory again: keys added are added, keys removed
// are dropped. A key file that fails to read is reported, and the key it
// held before (if any) is kept.
func (k *Keyring) Reload() error {
	ents, err := os.ReadDir(k.dir)
	if err != nil {
		return fmt.Errorf("kek dir: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reloaded = time.Now()
	keys := map[string]*kek{}
	var errs []error
	for _, e := range ents {
		id := idFromFile(e.Name(), PrivateExt)
		if id == "" {
			continue
		}
		priv, err := readKey(filepath.Join(k.dir, e.Name()))
		if err == nil {
			keys[id], err = newKEK(priv)
			clear(priv)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("kek %s: %w", id, err))
			if old, ok := k.keys[id]; ok {
				keys[id] = old
			} else {
				delete(keys, id)
			}
		}
	}
	k.keys = keys
	return errors.Join(errs...)
}

// key is the KEK id, the directory read again first when it is missing
// and either its file is there now or the directory was not read within
// CheckEvery.
func (k *Keyring) key(id string) (*kek, error) {
	k.mu.RLock()
	c, ok := k.keys[id]
	stale := time.Since(k.reloaded) >= CheckEvery
	k.mu.RUnlock()
	if ok {
		return c, nil
	}
	if !stale && ValidateID(id) == nil {
		_, err := os.Stat(filepath.Join(k.dir, PrivateFile(id)))
		stale = err == nil
	}
	if stale {
		_ = k.Reload() // a key file that fails to read is as good as missing here
		k.mu.RLock()
		c, ok = k.keys[id]
		k.mu.RUnlock()
		if ok {
			return c, nil
		}
	}
	return nil, fmt.Errorf("kek %q (not in %s): %w", id, k.dir, ErrUnknownKey)
}

// Has tells whether the keyring holds the KEK id.
func (k *Keyring) Has(id string) bool {
	_, err := k.key(id)
	return err == nil
}

// IDs are the ids of the KEKs held, sorted.
func (k *Keyring) IDs() []string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	ids := make([]string, 0, len(k.keys))
	for id := range k.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Sealer is a Sealer for the KEK id held (its public key), or an error
// wrapping ErrUnknownKey.
func (k *Keyring) Sealer(id string) (*Sealer, error) {
	c, err := k.key(id)
	if err != nil {
		return nil, err
	}
	return NewSealer(id, &c.pub), nil
}

// Open decrypts d; aad must be the additional data it was sealed with.
// It fails naming the KeyID (wrapping ErrUnknownKey) when the keyring
// lacks that KEK, and (wrapping ErrOpen) when anything was changed.
func (k *Keyring) Open(d api.SealedData, aad []byte) ([]byte, error) {
	c, err := k.key(d.KeyID)
	if err != nil {
		return nil, err
	}
	return c.open(d, aad)
}

// Rewrap unwraps d's data key with its KEK and wraps it for to's: the
// result names to's KEK and has d's nonce and ciphertext (no value is
// decrypted or re-encrypted).
func (k *Keyring) Rewrap(d api.SealedData, to *Sealer) (api.SealedData, error) {
	c, err := k.key(d.KeyID)
	if err != nil {
		return api.SealedData{}, err
	}
	var dk [KeySize]byte
	defer clear(dk[:])
	if err := c.unwrap(d, &dk); err != nil {
		return api.SealedData{}, err
	}
	id, pub := to.current()
	wrapped, err := boxSeal(dk[:], &pub)
	if err != nil {
		return api.SealedData{}, fmt.Errorf("wrap data key for kek %s: %w", id, err)
	}
	return api.SealedData{
		KeyID:      id,
		WrappedKey: wrapped,
		Nonce:      slices.Clone(d.Nonce),
		Ciphertext: slices.Clone(d.Ciphertext),
	}, nil
}
