package sdk

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

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
	resp, err := c.API.ClientInterface.WorkloadEvents(streaming(ctx), project, kind, name, &p, accept("text/event-stream"))
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

// readSSE parses a text/event-stream and delivers the events after w.last.
func readSSE(r io.Reader, w *sseWatch) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		id   string
		data strings.Builder
		has  bool
	)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errDropped
			}
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if has {
				if err := w.dispatch(id, data.String()); err != nil {
					return err
				}
			}
			id, has = "", false
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment, such as a keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "data":
			if has {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			has = true
		case "retry":
			if ms, err := strconv.Atoi(value); err == nil && ms >= 0 {
				w.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

// dispatch delivers one event unless it was delivered before.
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
