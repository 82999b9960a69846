package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/tmaxmax/go-sse"

	"atoll.dev/libs/computeapi"
)

// ListEvents returns a workload's retained events after the event id after
// (0 for all).
func (c *Client) ListEvents(ctx context.Context, project, kind, name string, after int64) ([]computeapi.Event, error) {
	var p computeapi.WorkloadEventsParams
	p.After = after
	r, err := c.API.WorkloadEventsWithResponse(ctx, project, kind, name, &p, accept("application/json"))
	l, err := decode[computeapi.EventList]("list events", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// callbackError carries the error of a caller's function out of a stream.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }
func (e *callbackError) Unwrap() error { return e.err }

// WatchEvents calls fn with each of a workload's events after the event id
// after (0 for every retained one), as they happen, over Server-Sent
// Events. A dropped connection is reopened with Last-Event-ID, so fn sees
// every event exactly once and in order. It returns fn's first error, a
// non-retryable answer of the gateway (as *Error), an error when
// reconnecting failed as many times in a row as the retry policy allows,
// or ctx.Err() once ctx is done.
func (c *Client) WatchEvents(ctx context.Context, project, kind, name string, after int64, fn func(computeapi.Event) error) error {
	w := &sseWatch{last: after, fn: fn}
	failures := 0
	for {
		connected, err := c.watchOnce(ctx, project, kind, name, w)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var cb *callbackError
		if errors.As(err, &cb) {
			return cb.err
		}
		var apiErr *Error
		if errors.As(err, &apiErr) {
			return apiErr
		}
		if connected {
			failures = 0
		}
		failures++
		if failures >= c.doer.policy.MaxAttempts {
			return fmt.Errorf("watch events of %s %s: reconnect after event %d: %w", kind, name, w.last, err)
		}
		wait := max(backoff(c.doer.policy, failures), w.retry)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// sseWatch is the state a watch keeps across connections.
type sseWatch struct {
	last  int64         // id of the last event delivered
	retry time.Duration // the server's reconnection delay
	fn    func(computeapi.Event) error
}

// errDropped is a stream's end: an event stream never ends on its own.
var errDropped = errors.New("event stream closed by the server")

// watchOnce reads one connection's events; connected says whether the
// gateway accepted the watch.
func (c *Client) watchOnce(ctx context.Context, project, kind, name string, w *sseWatch) (connected bool, err error) {
	p := computeapi.WorkloadEventsParams{Watch: true}
	if w.last > 0 {
		p.After, p.LastEventID = w.last, strconv.FormatInt(w.last, 10)
	}
	resp, err := c.API.WorkloadEvents(streaming(ctx), project, kind, name, &p, accept("text/event-stream"))
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		return false, errorFromResponse(resp)
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return false, &Error{Status: resp.StatusCode, Body: computeapi.Error{Code: "BadResponse", Message: fmt.Sprintf("watch answered %q, want text/event-stream", mt)}}
	}
	return true, readSSE(resp.Body, w)
}

// maxEventSize bounds one event on the wire; go-sse's default is 64 KiB.
const maxEventSize = 1 << 20

// readSSE parses a text/event-stream with go-sse and delivers the events
// after w.last. An event without data (an id or type alone) is not one, as
// for EventSource.
func readSSE(r io.Reader, w *sseWatch) error {
	tap := &retryTap{r: r, set: func(d time.Duration) { w.retry = d }}
	for ev, err := range sse.Read(tap, &sse.ReadConfig{MaxEventSize: maxEventSize}) {
		if err != nil {
			return err
		}
		if ev.Data == "" {
			continue
		}
		if err := w.dispatch(ev.LastEventID, ev.Data); err != nil {
			return err
		}
	}
	return errDropped
}

// retryTap passes a stream through and reports its retry fields, which
// sse.Read drops. It keeps at most 64 bytes of a line; a longer retry
// field is ignored.
type retryTap struct {
	r    io.Reader
	set  func(time.Duration)
	line []byte
	long bool // the current line is longer than any retry field
}

func (t *retryTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	for _, b := range p[:n] {
		switch {
		case b == '\n' || b == '\r':
			if v, ok := bytes.CutPrefix(t.line, []byte("retry:")); ok && !t.long {
				if ms, err := strconv.Atoi(string(bytes.TrimPrefix(v, []byte(" ")))); err == nil && ms >= 0 {
					t.set(time.Duration(ms) * time.Millisecond)
				}
			}
			t.line, t.long = t.line[:0], false
		case len(t.line) < 64:
			t.line = append(t.line, b)
		default:
			t.long = true
		}
	}
	return n, err
}

// dispatch delivers one event unless it was delivered before. id is the
// stream's last event ID, used when data carries none.
func (w *sseWatch) dispatch(id, data string) error {
	var ev computeapi.Event
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		return fmt.Errorf("event %s: malformed data: %w", id, err)
	}
	if ev.Id == 0 {
		if n, err := strconv.ParseInt(id, 10, 64); err == nil {
			ev.Id = n
		}
	}
	if ev.Id != 0 && ev.Id <= w.last {
		return nil // a replay of one already delivered
	}
	if err := w.fn(ev); err != nil {
		return &callbackError{err: err}
	}
	if ev.Id > w.last {
		w.last = ev.Id
	}
	return nil
}
