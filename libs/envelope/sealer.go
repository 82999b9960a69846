package envelope

import (
	"fmt"
	"sync"
	"time"

	"atoll.dev/libs/api"
)

// CheckEvery bounds how often a file-backed Sealer or a Keyring looks at
// its files for a change.
const CheckEvery = time.Second

// Sealer seals data for one KEK's public key. It holds no secret. A
// Sealer from LoadSealer follows its file: when the file changes
// (another KEK's public key renamed over it, or the file a Kubernetes
// Secret or ConfigMap mount swaps), the next Seal uses the new key; a
// file that fails to read leaves the last good key in use.
type Sealer struct {
	path string // the public key file, "" for a fixed key

	mu      sync.Mutex
	id      string        // the KEK's id; mu must be held
	pub     [KeySize]byte // the KEK's public key; mu must be held
	checked time.Time     // when path was last read; mu must be held
}

// NewSealer is a Sealer for the public key pub of the KEK id.
func NewSealer(id string, pub *[KeySize]byte) *Sealer {
	return &Sealer{id: id, pub: *pub}
}

// LoadSealer reads a public key file and follows it (see Sealer). The
// file holds "<id> <base64 of the key>" on one line (what GenerateKEK
// writes into kek-<id>.pub), so it may be copied or mounted under any
// name and replaced by another KEK's; a file holding the base64 alone
// takes its id from its name, kek-<id>.pub.
func LoadSealer(path string) (*Sealer, error) {
	s := &Sealer{path: path}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.checked = time.Now()
	return s, nil
}

// load reads s.path; mu must be held (or s not yet shared).
func (s *Sealer) load() error {
	id, k, err := readPublic(s.path)
	if err != nil {
		return fmt.Errorf("kek public key: %w", err)
	}
	s.id = id
	copy(s.pub[:], k)
	return nil
}

// current is the KEK to seal for, the file read again (a few dozen
// bytes) at most once per CheckEvery.
func (s *Sealer) current() (string, [KeySize]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); s.path != "" && now.Sub(s.checked) >= CheckEvery {
		s.checked = now
		_ = s.load() // a file caught half written or missing is read again at the next check
	}
	return s.id, s.pub
}

// KeyID is the id of the KEK s seals for.
func (s *Sealer) KeyID() string {
	id, _ := s.current()
	return id
}

// Seal encrypts plain under a fresh data key, wrapped for s's KEK; aad
// (a Secret's "project/name") must be given again to open it.
func (s *Sealer) Seal(plain, aad []byte) (api.SealedData, error) {
	id, pub := s.current()
	return seal(id, &pub, plain, aad)
}
