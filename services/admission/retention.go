package admission

import (
	"context"
	"sync"
	"time"

	"atoll.dev/libs/bus"
)

// retentionRefresh is how often the repair reads the events stream's
// oldest event.
const retentionRefresh = time.Minute

// retention tells when the events stream's oldest stored event was
// written. The stream keeps a week of events within its byte limit
// (bus.DefaultMaxBytes), dropping the oldest; a workload last written
// before its oldest event has had its own event dropped too, if it was
// published. The repair leaves such a workload's event alone: publishing
// it again would tell an old admission as news on every pass, and, once a
// busy region's stream is at its byte limit, push out the next oldest,
// whose workload would then be re-published too, round after round. A
// write lost by a crash is repaired within RepairEvery, long before the
// stream rotates past it.
type retention struct {
	bus *bus.Bus

	mu     sync.Mutex
	oldest time.Time // mu must be held: zero when unknown or empty
	read   time.Time // mu must be held
}

// before reports whether t is older than the stream's oldest event. An
// unreadable stream reports false (the repair then publishes, as before).
func (r *retention) before(ctx context.Context, t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.read) >= retentionRefresh {
		r.read = time.Now()
		if oldest, err := r.first(ctx); err == nil {
			r.oldest = oldest
		}
	}
	return !r.oldest.IsZero() && t.Before(r.oldest)
}

// first reads the stream's first message's time.
func (r *retention) first(ctx context.Context) (time.Time, error) {
	s, err := r.bus.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return time.Time{}, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if info.State.Msgs == 0 {
		return time.Time{}, nil
	}
	return info.State.FirstTime, nil
}
