package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrConflict says a compare-and-set lost a race: the key's revision moved
// (or the key appeared) since it was read.
var ErrConflict = errors.New("revision conflict")

// ErrNoChange, returned by a Mutator, ends Update without writing.
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

// Mutator returns the new value of a key from its current value; exists is
// false for a key that is missing or deleted. Returning ErrNoChange skips
// the write. It may run several times and must not have side effects.
type Mutator func(cur []byte, exists bool) ([]byte, error)

// Update reads key, applies fn and writes the result with compare-and-set,
// re-reading and retrying when another writer wins, up to 16 attempts.
// It returns the revision written (or read, on ErrNoChange).
func Update(ctx context.Context, kv jetstream.KeyValue, key string, fn Mutator) (uint64, error) {
	const attempts = 16
	for i := 0; ; i++ {
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
			// A deleted key reports not found; Create handles the tombstone.
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
		if !errors.Is(err, ErrConflict) || i+1 >= attempts {
			return 0, fmt.Errorf("update %s after %d attempts: %w", key, i+1, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(Jitter(time.Duration(i+1)*time.Millisecond, 0.5)):
		}
	}
}
