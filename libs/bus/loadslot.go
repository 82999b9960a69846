package bus

import (
	"context"
	"sync"
)

// Why a connection replays one bucket at a time.
//
// A watch is an ordered push consumer with flow control: the server sends
// it up to 32 MiB ahead of what the client has read (JetStream's flow
// control window). A NATS server cuts a client whose unread bytes exceed
// its max_pending (64 MiB by default) as a slow consumer. A replica that
// fills several mirrors of 100,000 keys at once on a busy machine (the
// aggregator holds seven) has several windows in flight on one
// connection, so the server cut it off, and each reconnect started every
// unfinished fill again from the first key: measured, seven mirrors of
// 100,000 values of 2 KB on one connection were cut 39 times in 30 s and
// never filled. One fill at a time keeps one window in flight: the same
// seven filled in 4.1-4.4 s, with no cut (TestMirrorsFillOneAtATime).

// loadSlots admits one whole-bucket replay at a time.
type loadSlots struct {
	once sync.Once
	ch   chan struct{}
}

func (l *loadSlots) slots() chan struct{} {
	l.once.Do(func() { l.ch = make(chan struct{}, 1) })
	return l.ch
}

// LoadSlot waits for the connection's replay slot (see above) and returns
// the function that gives it back, which is safe to call more than once;
// an error only when ctx ends first. Hold it from starting a watch that
// replays a whole bucket (or a large part of one) until the watch has
// caught up (its nil entry) or stopped.
func (b *Bus) LoadSlot(ctx context.Context) (release func(), err error) {
	ch := b.loads.slots()
	select {
	case ch <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() { once.Do(func() { <-ch }) }, nil
}
