package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrConflict says a compare-and-set lost a race: the key's revision moved
// (or the key appeared) since it was read.
var ErrConflict = errors.New("revision conflict")

// ErrNoChange is returned by a Mutator to end Update without writing.
var ErrNoChange = errors.New("no change")

// CompareAndSet writes value at key only if the key's latest revision is
// still rev (rev 0: only if the key does not exist). A lost race returns an
// error matching ErrConflict.
func CompareAndSet(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, rev uint64) (uint64, error) {
	var (
		n   uint64
		err error
	)
	if rev == 0 {
		n, err = kv.Create(ctx, key, value)
	} else {
		n, err = kv.Update(ctx, key, value, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("cas %s@%d: %w", key, rev, ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("cas %s@%d: %w", key, rev, err)
	}
	return n, nil
}

// CompareAndDelete deletes key (leaves a delete marker, which watchers
// see) only if its latest revision is still rev, and returns the marker's
// revision: the revision of the deletion, for an event's idempotency key.
// A lost race returns an error matching ErrConflict.
func CompareAndDelete(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, rev uint64) (uint64, error) {
	// kv.Delete does the same but keeps the marker's revision to itself.
	m := nats.NewMsg("$KV." + kv.Bucket() + "." + key)
	m.Header.Set("KV-Operation", "DEL")
	ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return 0, fmt.Errorf("delete %s@%d: %w", key, rev, ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("delete %s@%d: %w", key, rev, err)
	}
	return ack.Sequence, nil
}

// Mutator returns the new value of a key from its current value; exists is
// false for a key that is missing or deleted. Returning ErrNoChange skips
// the write; any other error ends Update with that error. It runs once per
// attempt, so possibly several times: anything it does besides computing
// the value must be safe to repeat, and what the last run did is what the
// written value goes with.
type Mutator func(cur []byte, exists bool) ([]byte, error)

// Update bounds: a lost race is retried after a jittered delay that starts
// at updateRetryBase and doubles up to updateRetryMax, at most
// UpdateAttempts times in all (about ten seconds of steady losing).
const (
	UpdateAttempts  = 100
	updateRetryBase = time.Millisecond
	updateRetryMax  = 100 * time.Millisecond
)

// Update is the platform's one compare-and-set loop: it reads key, applies
// fn and writes the result only if the key has not changed since it was
// read. When another writer wins, it re-reads and applies fn again, after
// a jittered, growing delay so contending writers spread out, until it
// writes, fn fails, ctx ends or UpdateAttempts races are lost (an error
// matching ErrConflict). It returns the revision written, or on
// ErrNoChange the revision read (0 for a missing key) with ErrNoChange.
func Update(ctx context.Context, kv jetstream.KeyValue, key string, fn Mutator) (uint64, error) {
	delay := updateRetryBase
	for attempt := 1; ; attempt++ {
		var (
			cur    []byte
			rev    uint64
			exists bool
		)
		e, err := kv.Get(ctx, key)
		switch {
		case err == nil:
			cur, rev, exists = e.Value(), e.Revision(), true
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// A deleted key reports not found; Create handles the marker.
		default:
			return 0, fmt.Errorf("update %s: read: %w", key, err)
		}
		next, err := fn(cur, exists)
		if errors.Is(err, ErrNoChange) {
			return rev, err
		}
		if err != nil {
			return 0, fmt.Errorf("update %s: %w", key, err)
		}
		n, err := CompareAndSet(ctx, kv, key, next, rev)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, ErrConflict) {
			return 0, fmt.Errorf("update %s: %w", key, err)
		}
		if attempt >= UpdateAttempts {
			return 0, fmt.Errorf("update %s: lost %d races: %w", key, attempt, err)
		}
		t := time.NewTimer(Jitter(delay, 0.5))
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("update %s: %w (after losing %d races)", key, ctx.Err(), attempt)
		case <-t.C:
		}
		delay = min(2*delay, updateRetryMax)
	}
}

// KeyState is a key's latest entry, delete markers included.
type KeyState struct {
	// Op is a put, a delete or a purge.
	Op jetstream.KeyValueOp
	// Revision is the entry's revision (for a delete, the deletion's).
	Revision uint64
	// Time is when the entry was written.
	Time time.Time
}

// LastEntry returns key's latest entry in bucket. Unlike a KeyValue's Get,
// which reports a deleted key as not found, it returns the delete marker:
// what a repair needs to announce a deletion. A key that never existed, or
// was purged away, is jetstream.ErrKeyNotFound.
func (b *Bus) LastEntry(ctx context.Context, bucket, key string) (KeyState, error) {
	s, err := b.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return KeyState{}, err
	}
	m, err := s.GetLastMsgForSubject(ctx, "$KV."+bucket+"."+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return KeyState{}, fmt.Errorf("last entry of %s in %s: %w", key, bucket, jetstream.ErrKeyNotFound)
	}
	if err != nil {
		return KeyState{}, fmt.Errorf("last entry of %s in %s: %w", key, bucket, err)
	}
	st := KeyState{Op: jetstream.KeyValuePut, Revision: m.Sequence, Time: m.Time}
	switch m.Header.Get("KV-Operation") {
	case "DEL":
		st.Op = jetstream.KeyValueDelete
	case "PURGE":
		st.Op = jetstream.KeyValuePurge
	}
	return st, nil
}

// Latest is a key's current value read from its bucket stream's leader
// (STREAM.MSG.GET), never from a follower: a KeyValue's Get is a direct
// get, which any replica that is about synchronized may answer, so after a
// partition it can return a value many writes old. Use it where a stale
// read costs more than the leader's round trip (a value whose sequence
// number decides what can still be known). A missing, deleted or purged
// key is jetstream.ErrKeyNotFound.
func (b *Bus) Latest(ctx context.Context, bucket, key string) (value []byte, rev uint64, err error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	if err != nil {
		return nil, 0, err
	}
	m, err := b.NC.RequestWithContext(ctx, jsAPI+"STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return nil, 0, fmt.Errorf("latest %s in %s: %w", key, bucket, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Sequence uint64 `json:"seq"`
			Header   []byte `json:"hdrs"`
			Data     []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, 0, fmt.Errorf("latest %s in %s: %w", key, bucket, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, 0, jetstream.ErrKeyNotFound
	case resp.Error != nil:
		return nil, 0, fmt.Errorf("latest %s in %s: %w", key, bucket, resp.Error)
	case resp.Message == nil:
		return nil, 0, fmt.Errorf("latest %s in %s: the answer holds no message", key, bucket)
	}
	if h := resp.Message.Header; bytes.Contains(h, []byte("KV-Operation: DEL")) || bytes.Contains(h, []byte("KV-Operation: PURGE")) {
		return nil, 0, jetstream.ErrKeyNotFound
	}
	return resp.Message.Data, resp.Message.Sequence, nil
}
