package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// idemRecord is the remembered outcome of a create made with an
// Idempotency-Key, in the idempotency bucket.
type idemRecord struct {
	// BodyHash is the SHA-256 of the admitted document.
	BodyHash string `json:"bodyHash"`
	// Done is false while the first request is still in flight.
	Done   bool            `json:"done"`
	Status int             `json:"status,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
	At     time.Time       `json:"at"`
}

// idemPendingFor is how long a claim of an in-flight first request holds
// before a retry may take over (the first gateway may have died).
const idemPendingFor = 30 * time.Second

// idempotentCreate admits a document once per (caller, project, key): the
// first request claims the key with a create-only write, later ones with
// the same document get the first outcome, and one with another document
// is refused.
func (s *Service) idempotentCreate(w http.ResponseWriter, r *http.Request, project, key string, body []byte) {
	if len(key) > 128 {
		writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "Idempotency-Key is too long",
			Fields: api.FieldErrors{{Field: "Idempotency-Key", Code: api.CodeInvalid, Reason: "at most 128 characters"}}}))
		return
	}
	sum := sha256.Sum256(body)
	bodyHash := hex.EncodeToString(sum[:])
	kd := sha256.Sum256([]byte(identity(r).Subject + "\x00" + project + "\x00" + key))
	kvKey := hex.EncodeToString(kd[:])
	// A claim or read lost with the bus connection ends as it drops (the
	// client retries), rather than when the client gives up.
	ctx, cancel := s.bus.UntilDisconnected(r.Context())
	defer cancel()

	for attempt := 0; ; attempt++ {
		claim, _ := json.Marshal(idemRecord{BodyHash: bodyHash, At: time.Now()})
		rev, err := s.idem.Create(ctx, kvKey, claim)
		if err == nil {
			s.finishIdempotent(w, r, kvKey, rev, bodyHash, body)
			return
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			writeRemoteError(w, r, err)
			return
		}
		e, err := s.idem.Get(ctx, kvKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired or released between the two calls
		}
		if err != nil {
			writeRemoteError(w, r, err)
			return
		}
		var rec idemRecord
		if json.Unmarshal(e.Value(), &rec) != nil {
			writeError(w, r, http.StatusInternalServerError, "Internal", "unreadable idempotency record")
			return
		}
		switch {
		case rec.BodyHash != bodyHash:
			writeError(w, r, http.StatusUnprocessableEntity, "IdempotencyKeyReused", "this Idempotency-Key was used with a different document")
			return
		case rec.Done:
			w.Header().Set("Idempotent-Replayed", "true")
			writeRawJSON(w, rec.Status, rec.Body)
			return
		case time.Since(rec.At) > idemPendingFor:
			// The first request's gateway died mid-way: take the claim over.
			if rev, err := bus.CompareAndSet(ctx, s.idem, kvKey, claim, e.Revision()); err == nil {
				s.finishIdempotent(w, r, kvKey, rev, bodyHash, body)
				return
			}
		}
		// The first request is in flight: wait for its outcome.
		select {
		case <-ctx.Done():
			writeError(w, r, http.StatusServiceUnavailable, "Unavailable", "the first request with this Idempotency-Key is still in flight")
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// finishIdempotent makes the call the claim at rev stands for and records
// its outcome; an outcome that says nothing final (the region did not
// answer) releases the claim so that a retry runs again.
func (s *Service) finishIdempotent(w http.ResponseWriter, r *http.Request, kvKey string, rev uint64, bodyHash string, body []byte) {
	stored, err := call(s, r, bus.AdmissionSubmit, body)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), idemWriteTimeout)
	defer cancel()
	// An outcome lost with the bus connection is not waited for: the
	// claim is released instead (recordIdempotent).
	rctx, stop := s.bus.UntilDisconnected(ctx)
	defer stop()
	var re *bus.RemoteError
	switch {
	case err == nil:
		// Record what the client gets: the stored document, rendered.
		view, _ := renderWorkload(stored, nil)
		s.recordIdempotent(rctx, kvKey, rev, bodyHash, http.StatusCreated, view)
		s.respondWorkload(w, r, http.StatusCreated, stored)
	case errors.As(err, &re) && re.Code < 500:
		var eb api.ErrorBody
		if json.Unmarshal(re.Body, &eb) != nil || eb.Code == "" {
			eb = api.ErrorBody{Code: http.StatusText(re.Code), Message: re.Description}
		}
		e := apiError(eb)
		b, _ := json.Marshal(e)
		s.recordIdempotent(rctx, kvKey, rev, bodyHash, re.Code, b)
		writeErrorBody(w, r, re.Code, e)
	default:
		_ = s.idem.Delete(ctx, kvKey, jetstream.LastRevision(rev))
		writeRemoteError(w, r, err)
	}
}

func (s *Service) recordIdempotent(ctx context.Context, kvKey string, rev uint64, bodyHash string, status int, body []byte) {
	b, _ := json.Marshal(idemRecord{BodyHash: bodyHash, Done: true, Status: status, Body: body, At: time.Now()})
	if _, err := s.idem.Update(ctx, kvKey, b, rev); err != nil {
		s.log.Warn("idempotency outcome not recorded; releasing the claim", "err", err)
		// A retry with the same key would otherwise wait for a claim
		// that stays pending for idemPendingFor; released, it asks
		// admission again, which answers a repeated submit with the
		// stored workload. Sent once the bus is back.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), idemWriteTimeout)
		defer cancel()
		_ = s.idem.Delete(rctx, kvKey, jetstream.LastRevision(rev))
	}
}

// idemWriteTimeout bounds writing a create's outcome, or releasing its
// claim, after admission answered.
const idemWriteTimeout = 5 * time.Second
