package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"

	"atoll.dev/libs/computeapi"
)

func event(id int64, name string) computeapi.Event {
	return computeapi.Event{Id: id, Project: "demo", Kind: "App", Name: "web", Event: name, Generation: 1,
		Time: time.Date(2026, 1, 1, 0, 0, int(id), 0, time.UTC)}
}

// sseFrame writes one event as the gateway does.
func sseFrame(w io.Writer, ev computeapi.Event) {
	b, _ := json.Marshal(ev)
	fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Id, ev.Event, b)
}

func TestWatchEventsResumesAfterDrop(t *testing.T) {
	all := []computeapi.Event{event(1, "admitted"), event(2, "scheduled"), event(3, "propagated"), event(4, "running"), event(5, "scaled"), event(6, "paused")}
	var (
		mu      sync.Mutex
		resumes []string
		conns   int
	)
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/projects/demo/workloads/App/web/events" || r.URL.Query().Get("watch") != "true" || r.Header.Get("Accept") != "text/event-stream" {
			t.Errorf("request %s %v", r.URL, r.Header)
		}
		mu.Lock()
		conns++
		n := conns
		resumes = append(resumes, r.Header.Get("Last-Event-ID")+"|"+r.URL.Query().Get("after"))
		mu.Unlock()
		var after int64
		if v := r.Header.Get("Last-Event-ID"); v != "" {
			after, _ = strconv.ParseInt(v, 10, 64)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, ": keep-alive\nretry: 10\n\n")
		switch n {
		case 1:
			// Three events, then a dropped connection mid-event.
			for _, ev := range all[:3] {
				sseFrame(w, ev)
			}
			fmt.Fprint(w, "id: 4\ndata: {\"id\":4,")
			http.NewResponseController(w).Flush()
			return
		default:
			// Replays the last delivered event too: the client must skip it.
			for _, ev := range all {
				if ev.Id >= after {
					sseFrame(w, ev)
				}
			}
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
		}
	})
	var got []int64
	errEnough := errors.New("enough")
	err := c.WatchEvents(context.Background(), "demo", "App", "web", 0, func(ev computeapi.Event) error {
		got = append(got, ev.Id)
		if ev.Id == 6 {
			return errEnough
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		t.Fatalf("WatchEvents = %v, want fn's error", err)
	}
	if diff := cmp.Diff([]int64{1, 2, 3, 4, 5, 6}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"|", "3|3"}, resumes); diff != "" {
		t.Errorf("Last-Event-ID|after per connection (-want +got):\n%s", diff)
	}
}

func TestWatchEventsGivesUpAndReportsErrors(t *testing.T) {
	t.Run("forbidden", func(t *testing.T) {
		c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
			apiError(w, http.StatusForbidden, "Forbidden", "no role in project demo")
		})
		err := c.WatchEvents(context.Background(), "demo", "App", "web", 0, func(computeapi.Event) error { return nil })
		if !IsForbidden(err) {
			t.Fatalf("err = %v, want 403", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sseFrame(w, event(1, "admitted"))
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
		})
		ctx, cancel := context.WithCancel(context.Background())
		err := c.WatchEvents(ctx, "demo", "App", "web", 0, func(computeapi.Event) error { cancel(); return nil })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("server keeps dropping before any event", func(t *testing.T) {
		var a attempts
		c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
			a.add(r)
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
		})
		err := c.WatchEvents(context.Background(), "demo", "App", "web", 7, func(computeapi.Event) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "after event 7") {
			t.Fatalf("err = %v", err)
		}
		// Each connection is itself retried by the client (3 attempts), 3 times.
		if a.n() != 9 {
			t.Errorf("%d requests, want 9", a.n())
		}
	})
}

func TestReadSSE(t *testing.T) {
	in := ": comment\n" +
		"id: 5\ndata: {\"id\":5,\"project\":\"p\",\"kind\":\"App\",\"name\":\"w\",\"event\":\"admitted\",\"generation\":1,\"time\":\"2026-01-01T00:00:00Z\"}\n\n" +
		"id: 6\r\ndata: {\"project\":\"p\",\"kind\":\"App\",\"name\":\"w\",\r\ndata: \"event\":\"running\",\"generation\":1,\"time\":\"2026-01-01T00:00:01Z\"}\r\n\r\n" +
		"id: 4\ndata: {\"id\":4,\"event\":\"old\",\"time\":\"2026-01-01T00:00:00Z\"}\n\n" +
		"retry: 1500\n\n"
	var got []string
	w := &sseWatch{fn: func(ev computeapi.Event) error { got = append(got, fmt.Sprintf("%d %s", ev.Id, ev.Event)); return nil }}
	err := readSSE(strings.NewReader(in), w)
	if !errors.Is(err, errDropped) {
		t.Fatalf("err = %v, want errDropped at EOF", err)
	}
	if diff := cmp.Diff([]string{"5 admitted", "6 running"}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if w.last != 6 || w.retry != 1500*time.Millisecond {
		t.Errorf("last %d retry %v, want 6 and 1.5s", w.last, w.retry)
	}
}

func TestReadSSEAcrossReads(t *testing.T) {
	// One byte per read, CR line ends, a retry field that is no retry
	// (too long), and an event without data.
	in := "retry: 250\r\r" +
		"id: 9\r\r" +
		"data: {\"id\":10,\"event\":\"running\",\"time\":\"2026-01-01T00:00:00Z\"}\r\r" +
		"retry: " + strings.Repeat("0", 60) + "7\r\r"
	var got []string
	w := &sseWatch{fn: func(ev computeapi.Event) error { got = append(got, fmt.Sprintf("%d %s", ev.Id, ev.Event)); return nil }}
	if err := readSSE(iotest.OneByteReader(strings.NewReader(in)), w); !errors.Is(err, errDropped) {
		t.Fatalf("err = %v, want errDropped at EOF", err)
	}
	if diff := cmp.Diff([]string{"10 running"}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if w.last != 10 || w.retry != 250*time.Millisecond {
		t.Errorf("last %d retry %v, want 10 and 250ms", w.last, w.retry)
	}
}

func TestStreamOutlivesAttemptTimeout(t *testing.T) {
	lines := []computeapi.LogLine{{Pod: "web-1", Line: "before"}, {Pod: "web-1", Line: "after"}}
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_ = json.NewEncoder(w).Encode(lines[0])
		http.NewResponseController(w).Flush()
		select { // well past the attempt timeout
		case <-time.After(500 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		_ = json.NewEncoder(w).Encode(lines[1])
	}, WithTimeout(100*time.Millisecond))
	var got []computeapi.LogLine
	err := c.Logs(context.Background(), "demo", "App", "web", computeapi.StreamLogsParams{Follow: true}, func(l computeapi.LogLine) error {
		got = append(got, l)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(lines, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

func TestListEvents(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "after=2" {
			t.Errorf("query %q, want only after=2", r.URL.RawQuery)
		}
		writeJSON(w, http.StatusOK, computeapi.EventList{Items: []computeapi.Event{event(3, "running")}})
	})
	evs, err := c.ListEvents(context.Background(), "demo", "App", "web", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Event != "running" {
		t.Errorf("events %v", evs)
	}
}

func TestLogsNDJSON(t *testing.T) {
	lines := []computeapi.LogLine{
		{Cluster: "zone-a", Pod: "web-1", Container: "web", Line: "hello"},
		{Cluster: "zone-b", Pod: "web-2", Container: "web", Line: "world"},
	}
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Header.Get("Accept") != "application/x-ndjson" || q.Get("follow") != "true" || q.Get("tail") != "10" || q.Get("container") != "web" || q.Has("sinceSeconds") {
			t.Errorf("request %s %v", r.URL, r.Header)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		for _, l := range lines {
			_ = enc.Encode(l)
			fmt.Fprintln(w)
			http.NewResponseController(w).Flush()
		}
	})
	var got []computeapi.LogLine
	err := c.Logs(context.Background(), "demo", "App", "web", computeapi.StreamLogsParams{Follow: true, Tail: 10, Container: "web"}, func(l computeapi.LogLine) error {
		got = append(got, l)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(lines, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

func TestLogsErrors(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "NotFound", "app web not found")
	})
	err := c.Logs(context.Background(), "demo", "App", "web", computeapi.StreamLogsParams{}, func(computeapi.LogLine) error { return nil })
	if !IsNotFound(err) {
		t.Fatalf("err = %v, want 404", err)
	}
	c = newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, "not json")
	})
	err = c.Logs(context.Background(), "demo", "App", "web", computeapi.StreamLogsParams{}, func(computeapi.LogLine) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "malformed line") {
		t.Fatalf("err = %v, want a malformed line", err)
	}
}

// execServer is a tiny gateway exec endpoint: it echoes stdin to stdout in
// upper case and stderr in lower case, reports resizes on stderr, and exits
// with the number of stdin bytes once stdin ends.
func execServer(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if got := q["command"]; strings.Join(got, " ") != "sh -c cat" || q.Get("stdin") != "true" || q.Get("tty") != "true" || r.Header.Get("Authorization") != "Bearer tok" {
			apiError(w, http.StatusBadRequest, "Invalid", fmt.Sprintf("unexpected request %s", r.URL.RawQuery))
			return
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.CloseNow()
		ctx := r.Context()
		total := 0
		for {
			typ, msg, err := conn.Read(ctx)
			if err != nil {
				t.Errorf("server read: %v", err)
				return
			}
			if typ != websocket.MessageBinary || len(msg) == 0 {
				t.Errorf("message type %v len %d", typ, len(msg))
				return
			}
			switch msg[0] {
			case ChannelStdin:
				if len(msg) == 1 {
					_ = conn.Write(ctx, websocket.MessageBinary, append([]byte{ChannelExit}, strconv.Itoa(total)...))
					_ = conn.Close(websocket.StatusNormalClosure, "")
					return
				}
				total += len(msg) - 1
				_ = conn.Write(ctx, websocket.MessageBinary, append([]byte{ChannelStdout}, bytes.ToUpper(msg[1:])...))
				_ = conn.Write(ctx, websocket.MessageBinary, append([]byte{ChannelStderr}, bytes.ToLower(msg[1:])...))
			case ChannelResize:
				var s TerminalSize
				if err := json.Unmarshal(msg[1:], &s); err != nil {
					t.Errorf("resize %q: %v", msg[1:], err)
				}
				_ = conn.Write(ctx, websocket.MessageBinary, fmt.Appendf([]byte{ChannelStderr}, "resize %dx%d;", s.Width, s.Height))
			}
		}
	}
}

func TestExecFraming(t *testing.T) {
	c := newTestClient(t, execServer(t))
	var stdout, stderr bytes.Buffer
	resize := make(chan TerminalSize, 1)
	resize <- TerminalSize{Width: 120, Height: 40}
	// stdin ends only after the resize was seen, so the order is known.
	pr, pw := io.Pipe()
	go func() {
		if !assert.Eventually(t, func() bool { return strings.Contains(syncString(&stderr), "resize") },
			5*time.Second, 5*time.Millisecond, "the resize reached the server") {
			pw.CloseWithError(errors.New("no resize seen"))
			return
		}
		pw.Write([]byte("Hello "))
		pw.Write([]byte("World"))
		pw.Close()
	}()
	code, err := c.Exec(context.Background(), "demo", "App", "web",
		computeapi.ExecShellParams{Command: []string{"sh", "-c", "cat"}, Tty: true},
		pr, &lockedWriter{w: &stdout}, &lockedWriter{w: &stderr}, resize)
	if err != nil {
		t.Fatal(err)
	}
	if code != 11 {
		t.Errorf("exit code %d, want 11 (bytes of stdin)", code)
	}
	if stdout.String() != "HELLO WORLD" || syncString(&stderr) != "resize 120x40;hello world" {
		t.Errorf("stdout %q stderr %q", stdout.String(), syncString(&stderr))
	}
}

func TestExecRejected(t *testing.T) {
	c := newTestClient(t, execServer(t))
	_, err := c.Exec(context.Background(), "demo", "App", "web",
		computeapi.ExecShellParams{Command: []string{"ls"}}, nil, nil, nil, nil)
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Body.Code != "Invalid" {
		t.Fatalf("err = %v, want the gateway's 400", err)
	}
}

func TestExecClosedWithoutExitCode(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		_ = conn.Write(r.Context(), websocket.MessageBinary, append([]byte{ChannelStdout}, "partial"...))
		_ = conn.Close(websocket.StatusGoingAway, "gateway stopping")
	})
	var out bytes.Buffer
	_, err := c.Exec(context.Background(), "demo", "App", "web", computeapi.ExecShellParams{Command: []string{"ls"}}, nil, &out, nil, nil)
	if !errors.Is(err, ErrNoExitCode) || out.String() != "partial" {
		t.Fatalf("err = %v, out %q; want ErrNoExitCode after the output", err, out.String())
	}
}

var bufMu sync.Mutex

// lockedWriter lets the test read a buffer the client writes to.
type lockedWriter struct{ w *bytes.Buffer }

func (l *lockedWriter) Write(p []byte) (int, error) {
	bufMu.Lock()
	defer bufMu.Unlock()
	return l.w.Write(p)
}

func syncString(b *bytes.Buffer) string {
	bufMu.Lock()
	defer bufMu.Unlock()
	return b.String()
}
