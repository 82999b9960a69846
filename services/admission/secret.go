package admission

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"atoll.dev/libs/api"
)

// Sealer seals a Secret's values under the operator's key-encryption key
// (libs/envelope's Sealer, loaded from the public key --kek-public
// names). Admission only seals: it cannot open what it sealed.
type Sealer interface {
	// Seal encrypts plain with a fresh data key, bound to aad.
	Seal(plain, aad []byte) (api.SealedData, error)
}

// sealSecret replaces a written Secret's values by their sealed form
// before anything is stored: Sealed (the JSON of the values under a
// fresh data key, bound to "project/name"), Keys (sorted), Digest, who
// wrote them and when; Data is cleared. Version is the write's to set,
// against the stored Secret. Without a Sealer a Secret is refused: its
// values are never stored in the clear.
func (s *Service) sealSecret(w *api.Workload, p Principal) *Error {
	spec, ok := w.Spec.(*api.SecretSpec)
	if !ok {
		return nil
	}
	var fe api.FieldErrors
	if spec.Sealed != nil {
		fe = append(fe, api.FieldError{Field: "spec.sealed", Code: api.CodeForbidden, Reason: "set by admission; write the values in spec.data"})
	}
	if len(spec.Data) == 0 {
		fe = append(fe, api.FieldError{Field: "spec.data", Code: api.CodeRequired, Reason: "a Secret is written with all its values (no read returns them)"})
	}
	if len(fe) > 0 {
		return &Error{Status: api.StatusUnprocessable, Body: api.ErrorBody{Code: "Invalid", Message: fe.Error(), Fields: fe}}
	}
	if s.cfg.Sealer == nil {
		return &Error{Status: api.StatusUnavailable, Body: api.ErrorBody{Code: "SecretsUnavailable",
			Message: "this region stores no Secrets: it has no key-encryption key; the operator must give admission one (--kek-public) before a Secret can be written"}}
	}
	plain, err := json.Marshal(spec.Data)
	if err != nil {
		return unavailable(fmt.Errorf("encode %s: %w", w, err))
	}
	sealed, err := s.cfg.Sealer.Seal(plain, SecretAAD(w.Metadata.Project, w.Metadata.Name))
	clear(plain)
	if err != nil {
		return unavailable(fmt.Errorf("seal %s: %w", w, err))
	}
	spec.Keys = slices.Sorted(maps.Keys(spec.Data))
	spec.Digest = SecretDigest(w.Metadata.Project, w.Metadata.Name, spec.Data)
	spec.Sealed = &sealed
	spec.UpdatedBy, spec.Updated, spec.Version = p.Name, time.Now().UTC(), 0
	spec.Data = nil
	return nil
}

// storeOverhead is room kept, under the bus's largest message, for what
// a write adds to the document (metadata set by admission, the message's
// headers).
const storeOverhead = 4 << 10

// checkStoredSize refuses a Config or a Secret whose stored document
// would not fit in one message of the bus: a Secret's sealed values take
// a third more than the values (base64), so one near api.MaxConfigBytes
// passes validation but cannot be stored. The caller is told with 422,
// not 503 from the write.
func (s *Service) checkStoredSize(w *api.Workload) *Error {
	if w.Kind != api.KindConfig && w.Kind != api.KindSecret {
		return nil
	}
	limit := s.bus.NC.MaxPayload() - storeOverhead
	b, err := json.Marshal(w)
	if err != nil || int64(len(b)) <= limit {
		return nil
	}
	fe := api.FieldErrors{{Field: "spec.data", Code: api.CodeTooLarge,
		Reason: fmt.Sprintf("stored (a Secret's values sealed), the %s takes %d bytes; the region stores at most %d", w.Kind, len(b), limit)}}
	return &Error{Status: api.StatusUnprocessable, Body: api.ErrorBody{Code: "Invalid", Message: fe.Error(), Fields: fe}}
}

// SecretAAD is the additional data a Secret's values are sealed with: its
// project and name, so that sealed values copied to another Secret do not
// open.
func SecretAAD(project, name string) []byte { return []byte(project + "/" + name) }

// SecretDigest is the SHA-256 (hex) of a Secret's values, in a canonical
// encoding: its project and name, then each key and value in key order,
// every string preceded by its length. The project and name salt it, so
// that equal values in two Secrets have different digests.
func SecretDigest(project, name string, data map[string]string) string {
	h := sha256.New()
	put := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put(project + "/" + name)
	for _, k := range slices.Sorted(maps.Keys(data)) {
		put(k)
		put(data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// secretVersion sets a sealed Secret's version against the stored one
// (nil at creation): the same values keep the stored version, sealing and
// writer; new values are the next version.
func secretVersion(stored, next *api.Workload) {
	spec, ok := next.Spec.(*api.SecretSpec)
	if !ok {
		return
	}
	if stored == nil {
		spec.Version = 1
		return
	}
	cur, ok := stored.Spec.(*api.SecretSpec)
	if !ok {
		return
	}
	if cur.Digest == spec.Digest {
		*spec = *cur
		return
	}
	spec.Version = cur.Version + 1
}

// sameSecretValues reports whether two Secrets hold the same values (their
// sealing differs with every write; their digests do not).
func sameSecretValues(a, b *api.Workload) (same, secret bool) {
	sa, ok1 := a.Spec.(*api.SecretSpec)
	sb, ok2 := b.Spec.(*api.SecretSpec)
	if !ok1 || !ok2 {
		return false, false
	}
	return sa.Digest == sb.Digest, true
}

// cloneSecret returns a copy of a Secret's spec (a write's attempts each
// set its version against what they read); any other spec as it is.
func cloneSecret(spec api.Spec) api.Spec {
	if s, ok := spec.(*api.SecretSpec); ok {
		c := *s
		return &c
	}
	return spec
}
