package debugstream_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/debugstream"
)

// backend is a Backend of in-memory containers, for the protocol's tests;
// the real one (the aggregator's) is tested against member clusters.
type backend struct {
	logs func(req debugstream.LogRequest) ([]debugstream.LogSource, error)
	exec func(req debugstream.ExecRequest) (debugstream.ExecTarget, error)
}

func (b *backend) Logs(_ context.Context, req debugstream.LogRequest) ([]debugstream.LogSource, error) {
	return b.logs(req)
}

func (b *backend) Exec(_ context.Context, req debugstream.ExecRequest) (debugstream.ExecTarget, error) {
	return b.exec(req)
}

// env is an embedded NATS with a server and a client on connections of their own.
type env struct {
	srvNC, cliNC *nats.Conn
	srv          *debugstream.Server
	client       *debugstream.Client
	b            *bus.Bus
}

func newEnv(t *testing.T, be *backend) *env {
	t.Helper()
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	e := &env{b: b, srvNC: connect(t, b), cliNC: connect(t, b)}
	e.srv = debugstream.NewServer(e.srvNC, be, debugstream.ServerOptions{Logger: quiet()})
	if err := e.srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.srv.Stop)
	// Short keepalives so that a lost peer shows within a second.
	e.client = &debugstream.Client{NC: e.cliNC, Keepalive: 50 * time.Millisecond, DeadAfter: 400 * time.Millisecond}
	return e
}

func connect(t *testing.T, b *bus.Bus) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(b.Server()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// criLines returns n lines "<prefix> <i>" as a kubelet serves them with
// timestamps, one millisecond apart from base.
func criLines(base time.Time, prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s %s %d\n", base.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), prefix, i)
	}
	return b.String()
}

func fixed(cluster, pod, container, text string) debugstream.LogSource {
	return debugstream.LogSource{Cluster: cluster, Pod: pod, Container: container,
		Open: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(text)), nil }}
}

// TestLogsOrder streams many lines of several containers, more than a
// window's worth, and checks each container's lines arrive whole and in order.
func TestLogsOrder(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const n = 3000
	e := newEnv(t, &backend{logs: func(req debugstream.LogRequest) ([]debugstream.LogSource, error) {
		var out []debugstream.LogSource
		for _, c := range []string{"zone-a", "zone-b", "zone-c"} {
			out = append(out, fixed(c, "web-"+c, "web", criLines(base, c, n)))
		}
		return out, nil
	}})
	e.client.Window = 4
	next := map[string]int{}
	err := e.client.Logs(context.Background(), debugstream.LogRequest{Project: "p", Kind: "App", Name: "web"}, func(l debugstream.LogLine) error {
		i := next[l.Cluster]
		if want := fmt.Sprintf("%s %d", l.Cluster, i); l.Line != want {
			return fmt.Errorf("line %q from %s, want %q", l.Line, l.Cluster, want)
		}
		if want := base.Add(time.Duration(i) * time.Millisecond); !l.Time.Equal(want) {
			return fmt.Errorf("line %d of %s at %v, want %v", i, l.Cluster, l.Time, want)
		}
		if l.Pod != "web-"+l.Cluster || l.Container != "web" {
			return fmt.Errorf("line from %s/%s", l.Pod, l.Container)
		}
		next[l.Cluster] = i + 1
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"zone-a", "zone-b", "zone-c"} {
		if next[c] != n {
			t.Errorf("%s: %d lines, want %d", c, next[c], n)
		}
	}
	require.Eventually(t, func() bool { return e.srv.Sessions() == 0 }, 2*time.Second, 10*time.Millisecond, "sessions open after the stream ended")
}

// TestLogsLines covers how lines are cut and stamped.
func TestLogsLines(t *testing.T) {
	ts := "2026-01-02T03:04:05.123456789Z"
	at, _ := time.Parse(time.RFC3339Nano, ts)
	long := strings.Repeat("x", debugstream.MaxLine+10)
	tests := []struct {
		name       string
		log        string
		timestamps bool
		want       []debugstream.LogLine
	}{
		{"plain", ts + " hello world\n", false, []debugstream.LogLine{{Time: at, Line: "hello world"}}},
		{"timestamps kept", ts + " hello\n", true, []debugstream.LogLine{{Time: at, Line: ts + " hello"}}},
		{"no timestamp", "hello\n", false, []debugstream.LogLine{{Line: "hello"}}},
		{"last line without newline", ts + " a\n" + ts + " b", false, []debugstream.LogLine{{Time: at, Line: "a"}, {Time: at, Line: "b"}}},
		{"empty line", ts + " \n", false, []debugstream.LogLine{{Time: at, Line: ""}}},
		{"long line split", ts + " " + long + "\n", false, []debugstream.LogLine{
			{Time: at, Line: long[:debugstream.MaxLine-len(ts)-1]}, {Time: at, Line: long[debugstream.MaxLine-len(ts)-1:]},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, &backend{logs: func(debugstream.LogRequest) ([]debugstream.LogSource, error) {
				return []debugstream.LogSource{fixed("c", "p", "k", tc.log)}, nil
			}})
			var got []debugstream.LogLine
			err := e.client.Logs(context.Background(), debugstream.LogRequest{Project: "p", Kind: "Pod", Name: "p", Timestamps: tc.timestamps}, func(l debugstream.LogLine) error {
				got = append(got, debugstream.LogLine{Time: l.Time, Line: l.Line})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d lines %q, want %d", len(got), got, len(tc.want))
			}
			for i := range got {
				if !got[i].Time.Equal(tc.want[i].Time) || got[i].Line != tc.want[i].Line {
					t.Errorf("line %d: (%v, %.40q), want (%v, %.40q)", i, got[i].Time, got[i].Line, tc.want[i].Time, tc.want[i].Line)
				}
			}
		})
	}
}

// countingReader is an endless log that counts what was read of it.
type countingReader struct {
	read   atomic.Int64
	closed chan struct{}
	once   sync.Once
}

func (r *countingReader) Read(p []byte) (int, error) {
	select {
	case <-r.closed:
		return 0, io.ErrClosedPipe
	default:
	}
	line := time.Now().UTC().Format(time.RFC3339Nano) + " " + strings.Repeat("y", 200) + "\n"
	n := 0
	for n+len(line) <= len(p) {
		n += copy(p[n:], line)
	}
	r.read.Add(int64(n))
	return n, nil
}

func (r *countingReader) Close() error {
	r.once.Do(func() { close(r.closed) })
	return nil
}

// TestLogsSlowReader checks that a reader that stops reading stalls the
// source: the server reads only about a window ahead, not the whole log.
func TestLogsSlowReader(t *testing.T) {
	src := &countingReader{closed: make(chan struct{})}
	e := newEnv(t, &backend{logs: func(debugstream.LogRequest) ([]debugstream.LogSource, error) {
		return []debugstream.LogSource{{Cluster: "c", Pod: "p", Container: "k", Open: func(context.Context) (io.ReadCloser, error) { return src, nil }}}, nil
	}})
	e.client.Window = 4
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	got := 0
	go func() {
		done <- e.client.Logs(ctx, debugstream.LogRequest{Project: "p", Kind: "Pod", Name: "p", Follow: true}, func(debugstream.LogLine) error {
			got++
			if got == 1 {
				<-release // a reader stuck on its first line
			}
			return nil
		})
	}()
	// Let the server run into the window: its reads stop growing.
	var first int64 = -1
	require.Eventually(t, func() bool {
		n := src.read.Load()
		stopped := n > 0 && n == first
		first = n
		return stopped
	}, 5*time.Second, 100*time.Millisecond, "the server's reads never stopped")
	// The subject: it stays there while the reader is stuck.
	require.Never(t, func() bool { return src.read.Load() != first }, 700*time.Millisecond, 10*time.Millisecond, "the server read on")
	stalled := src.read.Load()
	// Window of 4 frames of 32 KiB, 64 queued lines, 16 KiB read buffers:
	// well under 1 MiB; unbounded, this source gives gigabytes a second.
	if stalled > 1<<20 || stalled != first {
		t.Errorf("server read %d bytes, then %d, of a log nobody reads; want a bounded, stalled read", first, stalled)
	}
	close(release)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, src.read.Load(), 4*stalled, "bytes read since the reader went on")
	}, 5*time.Second, 10*time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Logs returned %v, want context.Canceled", err)
	}
}

// follower is a followed log the test writes to.
type follower struct {
	pr     *io.PipeReader
	pw     *io.PipeWriter
	ctxEnd chan struct{} // closed when the server's context for the stream ends
}

func newFollower() *follower {
	pr, pw := io.Pipe()
	return &follower{pr: pr, pw: pw, ctxEnd: make(chan struct{})}
}

func (f *follower) source() debugstream.LogSource {
	return debugstream.LogSource{Cluster: "c", Pod: "p", Container: "k", Open: func(ctx context.Context) (io.ReadCloser, error) {
		context.AfterFunc(ctx, func() { close(f.ctxEnd) })
		return f.pr, nil
	}}
}

func (f *follower) write(t *testing.T, line string) {
	t.Helper()
	if _, err := f.pw.Write([]byte(time.Now().UTC().Format(time.RFC3339Nano) + " " + line + "\n")); err != nil {
		t.Fatal(err)
	}
}

// followLogs starts Logs with Follow and returns its lines and result.
func followLogs(ctx context.Context, c *debugstream.Client) (<-chan string, <-chan error) {
	lines := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		done <- c.Logs(ctx, debugstream.LogRequest{Project: "p", Kind: "Pod", Name: "p", Follow: true}, func(l debugstream.LogLine) error {
			lines <- l.Line
			return nil
		})
	}()
	return lines, done
}

func expectLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	select {
	case got := <-lines:
		if got != want {
			t.Fatalf("line %q, want %q", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no line %q", want)
	}
}

// TestServerGone: the server's connection dies mid-stream, without an end
// frame; the client gives up within its dead-peer timeout.
func TestServerGone(t *testing.T) {
	f := newFollower()
	e := newEnv(t, &backend{logs: func(debugstream.LogRequest) ([]debugstream.LogSource, error) {
		return []debugstream.LogSource{f.source()}, nil
	}})
	lines, done := followLogs(context.Background(), e.client)
	f.write(t, "one")
	expectLine(t, lines, "one")
	start := time.Now()
	e.srvNC.Close()
	select {
	case err := <-done:
		if !errors.Is(err, debugstream.ErrPeerGone) {
			t.Errorf("Logs returned %v, want ErrPeerGone", err)
		}
		// DeadAfter 400ms, checked every keepalive of 50ms.
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("client noticed the server gone after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Logs still running 5s after the server went")
	}
}

// TestServerGoneDefaults is TestServerGone with the default timing: a dead
// server ends the session within 15 seconds.
func TestServerGoneDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the default dead-peer timeout")
	}
	t.Parallel()
	f := newFollower()
	e := newEnv(t, &backend{logs: func(debugstream.LogRequest) ([]debugstream.LogSource, error) {
		return []debugstream.LogSource{f.source()}, nil
	}})
	lines, done := followLogs(context.Background(), &debugstream.Client{NC: e.cliNC})
	f.write(t, "one")
	expectLine(t, lines, "one")
	start := time.Now()
	e.srvNC.Close()
	select {
	case err := <-done:
		d := time.Since(start)
		if !errors.Is(err, debugstream.ErrPeerGone) {
			t.Errorf("Logs returned %v, want ErrPeerGone", err)
		}
		if d < debugstream.DefaultDeadAfter || d > 15*time.Second {
			t.Errorf("client noticed the server gone after %v, want between %v and 15s", d, debugstream.DefaultDeadAfter)
		}
		t.Logf("server gone noticed after %v", d.Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("Logs still running 20s after the server went")
	}
}

// TestClientCancel: the client's context ends; the server's session, and
// its stream from the cluster, end at once.
func TestClientCancel(t *testing.T) {
	f := newFollower()
	e := newEnv(t, &backend{logs: func(debugstream.LogRequest) ([]debugstream.LogSource, error) {
		return []debugstream.LogSource{f.source()}, nil
	}})
	// Default timing: the close frame, not the dead-peer timeout, ends it.
	e.client = &debugstream.Client{NC: e.cliNC}
	ctx, cancel := context.WithCancel(context.Background())
	lines, done := followLogs(ctx, e.client)
	f.write(t, "one")
	expectLine(t, lines, "one")
	if n := e.srv.Sessions(); n != 1 {
		t.Fatalf("%d sessions open, want 1", n)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Logs returned %v, want context.Canceled", err)
	}
	select {
	case <-f.ctxEnd:
	case <-time.After(2 * time.Second):
		t.Fatal("the server still reads the log 2s after the client cancelled")
	}
	require.Eventually(t, func() bool { return e.srv.Sessions() == 0 }, 2*time.Second, 10*time.Millisecond, "sessions open")
}

// TestClientGone: the client's connection dies without a close frame; the
// server ends the session within the dead-peer timeout.
func TestClientGone(t *testing.T) {
	f := newFollower()
	e := newEnv(t, &backend{logs: func(debugstream.LogRequest) ([]debugstream.LogSource, error) {
		return []debugstream.LogSource{f.source()}, nil
	}})
	lines, _ := followLogs(context.Background(), e.client)
	f.write(t, "one")
	expectLine(t, lines, "one")
	start := time.Now()
	e.cliNC.Close()
	select {
	case <-f.ctxEnd:
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("server noticed the client gone after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server still reads the log 5s after the client went")
	}
	require.Eventually(t, func() bool { return e.srv.Sessions() == 0 }, 2*time.Second, 10*time.Millisecond, "sessions open")
}

// TestCallbackError: an error from the callback ends the session and is returned.
func TestCallbackError(t *testing.T) {
	f := newFollower()
	e := newEnv(t, &backend{logs: func(debugstream.LogRequest) ([]debugstream.LogSource, error) {
		return []debugstream.LogSource{f.source()}, nil
	}})
	stop := errors.New("enough")
	done := make(chan error, 1)
	go func() {
		done <- e.client.Logs(context.Background(), debugstream.LogRequest{Project: "p", Kind: "Pod", Name: "p", Follow: true},
			func(debugstream.LogLine) error { return stop })
	}()
	f.write(t, "one")
	if err := <-done; !errors.Is(err, stop) {
		t.Errorf("Logs returned %v, want the callback's error", err)
	}
	select {
	case <-f.ctxEnd:
	case <-time.After(2 * time.Second):
		t.Fatal("the server still reads the log after the callback failed")
	}
}

// TestServerStop: a stopping server ends its sessions with 503.
func TestServerStop(t *testing.T) {
	f := newFollower()
	e := newEnv(t, &backend{logs: func(debugstream.LogRequest) ([]debugstream.LogSource, error) {
		return []debugstream.LogSource{f.source()}, nil
	}})
	lines, done := followLogs(context.Background(), e.client)
	f.write(t, "one")
	expectLine(t, lines, "one")
	e.srv.Stop()
	var de *debugstream.Error
	if err := <-done; !errors.As(err, &de) || de.Code != http.StatusServiceUnavailable {
		t.Errorf("Logs returned %v, want a 503 *Error", err)
	}
}

// TestLogsPartialFailure: one container's log fails to open; the others
// are streamed, and Logs then reports the failure.
func TestLogsPartialFailure(t *testing.T) {
	e := newEnv(t, &backend{logs: func(debugstream.LogRequest) ([]debugstream.LogSource, error) {
		return []debugstream.LogSource{
			fixed("zone-a", "p", "k", "2026-01-01T00:00:00Z fine\n"),
			{Cluster: "zone-b", Pod: "q", Container: "k", Open: func(context.Context) (io.ReadCloser, error) {
				return nil, debugstream.Errorf(http.StatusServiceUnavailable, "cluster zone-b unreachable")
			}},
		}, nil
	}})
	var got []string
	err := e.client.Logs(context.Background(), debugstream.LogRequest{Project: "p", Kind: "App", Name: "p"}, func(l debugstream.LogLine) error {
		got = append(got, l.Cluster+": "+l.Line)
		return nil
	})
	if len(got) != 1 || got[0] != "zone-a: fine" {
		t.Errorf("lines %q, want the healthy container's", got)
	}
	var de *debugstream.Error
	if !errors.As(err, &de) || de.Code != http.StatusServiceUnavailable || !strings.Contains(de.Message, "zone-b/q/k") {
		t.Errorf("Logs returned %v, want a 503 naming zone-b/q/k", err)
	}
}

// TestRefusals: refusals come back as *Error with their code.
func TestRefusals(t *testing.T) {
	e := newEnv(t, &backend{
		logs: func(req debugstream.LogRequest) ([]debugstream.LogSource, error) {
			if req.Name == "empty" {
				return nil, nil
			}
			return nil, debugstream.Errorf(http.StatusNotFound, "no %s %s", req.Kind, req.Name)
		},
		exec: func(req debugstream.ExecRequest) (debugstream.ExecTarget, error) {
			return debugstream.ExecTarget{}, debugstream.Errorf(http.StatusNotFound, "no %s %s", req.Kind, req.Name)
		},
	})
	ctx := context.Background()
	nop := func(debugstream.LogLine) error { return nil }
	tests := []struct {
		name string
		call func() error
		code int
	}{
		{"unknown workload logs", func() error {
			return e.client.Logs(ctx, debugstream.LogRequest{Project: "p", Kind: "App", Name: "nope"}, nop)
		}, 404},
		{"workload without pods", func() error {
			return e.client.Logs(ctx, debugstream.LogRequest{Project: "p", Kind: "App", Name: "empty"}, nop)
		}, 404},
		{"unknown workload exec", func() error {
			_, err := e.client.Exec(ctx, debugstream.ExecRequest{Project: "p", Kind: "App", Name: "nope", Command: []string{"true"}}, debugstream.Streams{})
			return err
		}, 404},
		{"no command", func() error {
			_, err := e.client.Exec(ctx, debugstream.ExecRequest{Project: "p", Kind: "App", Name: "web"}, debugstream.Streams{})
			return err
		}, 400},
		{"name not a subject token", func() error {
			return e.client.Logs(ctx, debugstream.LogRequest{Project: "p", Kind: "App", Name: "a.b"}, nop)
		}, 400},
		{"no project", func() error {
			return e.client.Logs(ctx, debugstream.LogRequest{Kind: "App", Name: "web"}, nop)
		}, 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var de *debugstream.Error
			if err := tc.call(); !errors.As(err, &de) || de.Code != tc.code {
				t.Errorf("got %v, want *Error %d", err, tc.code)
			}
		})
	}
}

// TestNoServer: without a server, opening fails with 503 at once.
func TestNoServer(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Config{StoreDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	start := time.Now()
	err = debugstream.Logs(context.Background(), b.NC, debugstream.LogRequest{Project: "p", Kind: "App", Name: "web"}, func(debugstream.LogLine) error { return nil })
	var de *debugstream.Error
	if !errors.As(err, &de) || de.Code != http.StatusServiceUnavailable {
		t.Errorf("got %v, want *Error 503", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v to say no server", d)
	}
}

// cat is an exec target that copies stdin to stdout, writes its argument
// to stderr, records resizes and exits with the code named by its second argument.
func cat(sizes chan<- debugstream.TerminalSize) func(req debugstream.ExecRequest) (debugstream.ExecTarget, error) {
	return func(req debugstream.ExecRequest) (debugstream.ExecTarget, error) {
		return debugstream.ExecTarget{Cluster: "c", Pod: "p", Container: "k", Run: func(ctx context.Context, eio debugstream.ExecIO) (int, error) {
			if eio.Resize != nil {
				go func() {
					for s := range eio.Resize {
						sizes <- s
					}
				}()
			}
			if _, err := io.WriteString(eio.Stderr, req.Command[0]); err != nil {
				return -1, err
			}
			if eio.Stdin != nil {
				if _, err := io.Copy(eio.Stdout, eio.Stdin); err != nil {
					return -1, err
				}
			}
			code := 0
			if len(req.Command) > 1 {
				code, _ = strconv.Atoi(req.Command[1])
			}
			return code, nil
		}}, nil
	}
}

// TestExec: stdin and stdout both ways through small windows, in order,
// stderr apart, resizes delivered, and the exit code.
func TestExec(t *testing.T) {
	sizes := make(chan debugstream.TerminalSize, 10)
	e := newEnv(t, &backend{exec: cat(sizes)})
	e.client.Window = 4
	in := make([]byte, 3<<20)
	if _, err := rand.Read(in); err != nil {
		t.Fatal(err)
	}
	resize := make(chan debugstream.TerminalSize, 1)
	resize <- debugstream.TerminalSize{Width: 120, Height: 40}
	var stdout, stderr bytes.Buffer
	code, err := e.client.Exec(context.Background(),
		debugstream.ExecRequest{Project: "p", Kind: "Pod", Name: "p", Command: []string{"cat", "7"}, Stdin: true, TTY: true},
		debugstream.Streams{Stdin: bytes.NewReader(in), Stdout: &stdout, Stderr: &stderr, Resize: resize})
	if err != nil {
		t.Fatal(err)
	}
	if code != 7 {
		t.Errorf("exit code %d, want 7", code)
	}
	if !bytes.Equal(stdout.Bytes(), in) {
		t.Errorf("stdout: %d bytes differing from the %d bytes of stdin", stdout.Len(), len(in))
	}
	if stderr.String() != "cat" {
		t.Errorf("stderr %q, want %q", stderr.String(), "cat")
	}
	select {
	case s := <-sizes:
		if s != (debugstream.TerminalSize{Width: 120, Height: 40}) {
			t.Errorf("resize %+v", s)
		}
	case <-time.After(2 * time.Second):
		t.Error("resize not delivered")
	}
}

// TestExecCancel: cancelling the client ends the command.
func TestExecCancel(t *testing.T) {
	ended := make(chan error, 1)
	e := newEnv(t, &backend{exec: func(debugstream.ExecRequest) (debugstream.ExecTarget, error) {
		return debugstream.ExecTarget{Run: func(ctx context.Context, eio debugstream.ExecIO) (int, error) {
			_, _ = io.WriteString(eio.Stdout, "started\n")
			<-ctx.Done()
			ended <- context.Cause(ctx)
			return -1, ctx.Err()
		}}, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	defer pw.Close()
	done := make(chan error, 1)
	go func() {
		_, err := e.client.Exec(ctx, debugstream.ExecRequest{Project: "p", Kind: "Pod", Name: "p", Command: []string{"sleep"}}, debugstream.Streams{Stdout: pw})
		done <- err
	}()
	buf := make([]byte, 8)
	if _, err := io.ReadFull(pr, buf); err != nil || string(buf) != "started\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Exec returned %v, want context.Canceled", err)
	}
	select {
	case err := <-ended:
		t.Logf("command ended: %v", err)
	case <-time.After(2 * time.Second):
		t.Fatal("command still running 2s after the client cancelled")
	}
}

// TestFramesLost: a server whose frames skip a sequence number (as after a
// slow-consumer drop) makes the client fail rather than show a log with a hole.
func TestFramesLost(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Config{StoreDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	srv := connect(t, b)
	// A hand-made server: it accepts, then sends frames 1 and 3.
	_, err = srv.Subscribe(bus.DebugSubject("logs", "p", "pod", "p"), func(m *nats.Msg) {
		var req struct{ Session string }
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Error(err)
			return
		}
		_ = m.Respond([]byte(`{"containers":1}`))
		for _, seq := range []string{"1", "3"} {
			f := nats.NewMsg(bus.DebugSessionSubject(req.Session, "down"))
			f.Header.Set("Debug-Frame", "logs")
			f.Header.Set("Debug-Seq", seq)
			f.Data = []byte(`[{"cluster":"c","pod":"p","container":"k","line":"frame ` + seq + `"}]`)
			_ = srv.PublishMsg(f)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = debugstream.Logs(context.Background(), connect(t, b), debugstream.LogRequest{Project: "p", Kind: "Pod", Name: "p", Follow: true}, func(l debugstream.LogLine) error {
		got = append(got, l.Line)
		return nil
	})
	if !errors.Is(err, debugstream.ErrFramesLost) {
		t.Errorf("Logs returned %v, want ErrFramesLost", err)
	}
	if len(got) != 1 || got[0] != "frame 1" {
		t.Errorf("lines %q, want only frame 1", got)
	}
}
