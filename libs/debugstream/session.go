package debugstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// peer is one end of a session: it publishes frames to out, in order and
// within the window, and receives the other end's frames from in, checking
// their order, following their acks and noticing when they stop.
type peer struct {
	nc  *nats.Conn
	out string
	sub *nats.Subscription
	set settings

	mu       sync.Mutex
	sent     uint64        // mu must be held: last sequence number sent
	inFlight uint64        // mu must be held: windowed frames sent
	freed    uint64        // mu must be held: of those, how many the peer consumed
	freedCh  chan struct{} // mu must be held: closed and replaced when freed grows

	recvMu    sync.Mutex
	recvd     uint64    // recvMu must be held: last sequence number received
	consumed  uint64    // recvMu must be held: windowed frames consumed here
	acked     uint64    // recvMu must be held: consumed as last told to the peer
	lastHeard time.Time // recvMu must be held
}

// newPeer subscribes to in. The subscription's buffer holds a window of
// frames and some control frames; a peer that overruns it loses frames, and
// the gap ends the session.
func newPeer(nc *nats.Conn, in, out string, set settings) (*peer, error) {
	sub, err := nc.SubscribeSync(in)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", in, err)
	}
	msgs := set.window + 64
	if err := sub.SetPendingLimits(msgs, msgs*(4*MaxFrame+1024)); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe %s: %w", in, err)
	}
	return &peer{nc: nc, out: out, sub: sub, set: set, freedCh: make(chan struct{}), lastHeard: time.Now()}, nil
}

// close unsubscribes.
func (p *peer) close() { _ = p.sub.Unsubscribe() }

// send publishes one frame. A windowed frame waits until the peer has room
// for it, or ctx ends; sequenced frames carry the next sequence number.
func (p *peer) send(ctx context.Context, typ string, data []byte, hdr nats.Header, sequenced, windowed bool) error {
	for {
		p.mu.Lock()
		if !windowed || p.inFlight-p.freed < uint64(p.set.window) {
			m := nats.NewMsg(p.out)
			if hdr != nil {
				m.Header = hdr
			}
			m.Header.Set(hdrFrame, typ)
			if sequenced {
				p.sent++
				m.Header.Set(hdrSeq, strconv.FormatUint(p.sent, 10))
			}
			if windowed {
				p.inFlight++
			}
			m.Data = data
			// Published under mu: the order on the wire is the order of Debug-Seq.
			err := p.nc.PublishMsg(m)
			p.mu.Unlock()
			if err != nil {
				return fmt.Errorf("send %s frame: %w", typ, err)
			}
			return nil
		}
		ch := p.freedCh
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// control sends an unsequenced frame carrying the consumed count.
func (p *peer) control(typ string) {
	p.recvMu.Lock()
	n := p.consumed
	p.acked = n
	p.recvMu.Unlock()
	m := nats.NewMsg(p.out)
	m.Header.Set(hdrFrame, typ)
	m.Header.Set(hdrAck, strconv.FormatUint(n, 10))
	_ = p.nc.PublishMsg(m) // best effort: the next ping repeats it
}

// pings sends a ping every keepalive until ctx ends.
func (p *peer) pings(ctx context.Context) {
	t := time.NewTicker(p.set.keepalive)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.control(framePing)
		}
	}
}

// consume marks one windowed frame as consumed, and tells the peer every
// quarter window.
func (p *peer) consume() {
	p.recvMu.Lock()
	p.consumed++
	due := p.consumed-p.acked >= uint64(max(p.set.window/4, 1))
	p.recvMu.Unlock()
	if due {
		p.control(frameAck)
	}
}

// onFreed records the peer's consumed count.
func (p *peer) onFreed(n uint64) {
	p.mu.Lock()
	if n > p.freed && n <= p.inFlight {
		p.freed = n
		close(p.freedCh)
		p.freedCh = make(chan struct{})
	}
	p.mu.Unlock()
}

// recv returns the next sequenced frame, handling pings and acks on the
// way. It fails with ErrPeerGone when nothing came for deadAfter, with
// ErrFramesLost on a gap, with errClosed on the client's close frame, and
// with ctx's cause when ctx ends.
func (p *peer) recv(ctx context.Context) (*nats.Msg, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, p.set.keepalive)
		m, err := p.sub.NextMsgWithContext(wctx)
		cancel()
		now := time.Now()
		p.recvMu.Lock()
		if err == nil {
			p.lastHeard = now
		}
		silent := now.Sub(p.lastHeard)
		p.recvMu.Unlock()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case errors.Is(err, context.DeadlineExceeded):
			if silent > p.set.deadAfter {
				return nil, fmt.Errorf("%w: nothing heard for %v", ErrPeerGone, silent.Round(time.Millisecond))
			}
			continue
		case errors.Is(err, nats.ErrSlowConsumer):
			return nil, fmt.Errorf("%w: receive buffer overrun", ErrFramesLost)
		default:
			return nil, fmt.Errorf("receive frame: %w", err)
		}
		if a := m.Header.Get(hdrAck); a != "" {
			if n, err := strconv.ParseUint(a, 10, 64); err == nil {
				p.onFreed(n)
			}
		}
		switch m.Header.Get(hdrFrame) {
		case framePing, frameAck:
			continue
		case frameClose:
			return nil, errClosed
		}
		seq, err := strconv.ParseUint(m.Header.Get(hdrSeq), 10, 64)
		p.recvMu.Lock()
		want := p.recvd + 1
		if err == nil && seq == want {
			p.recvd = seq
		}
		p.recvMu.Unlock()
		if err != nil || seq != want {
			return nil, fmt.Errorf("%w: got %s frame %q, want sequence %d", ErrFramesLost, m.Header.Get(hdrFrame), m.Header.Get(hdrSeq), want)
		}
		return m, nil
	}
}
