package debugstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"atoll.dev/libs/bus"
)

// Client opens debug sessions on a NATS connection. The zero values of its
// settings are the defaults; Logs and Exec use a Client with defaults.
type Client struct {
	// NC is the connection to the region's NATS.
	NC *nats.Conn
	// Keepalive is how often both ends ping (default DefaultKeepalive).
	Keepalive time.Duration
	// DeadAfter is how long either end waits for a frame before it gives
	// the session up (default DefaultDeadAfter).
	DeadAfter time.Duration
	// Window is how many data frames may await consumption per direction
	// (default DefaultWindow).
	Window int
	// OpenTimeout bounds the open request (default DefaultOpenTimeout).
	OpenTimeout time.Duration
}

// Logs streams lines to each (called from one goroutine) until ctx ends, or,
// without Follow, until every container's log has ended. The containers are
// those of the workload's Pods that had started when the session opened.
// Lines of one container come in order; lines of different containers
// interleave as they arrive. A workload without Pods -> *Error with Code 404. When some
// containers' logs could not be read, the others are still streamed and Logs
// then returns an *Error naming the failures. An error from each ends the
// session and is returned.
func Logs(ctx context.Context, nc *nats.Conn, req LogRequest, each func(LogLine) error) error {
	return (&Client{NC: nc}).Logs(ctx, req, each)
}

// Exec runs the command in a container of one of the workload's Pods and
// returns its exit code. The exit code is meaningful only when err is nil.
func Exec(ctx context.Context, nc *nats.Conn, req ExecRequest, s Streams) (exitCode int, err error) {
	return (&Client{NC: nc}).Exec(ctx, req, s)
}

// Logs is the package's Logs with c's settings.
func (c *Client) Logs(ctx context.Context, req LogRequest, each func(LogLine) error) error {
	if err := checkWorkload(req.Project, req.Kind, req.Name); err != nil {
		return err
	}
	sess, _, err := c.open(ctx, verbLogs, req.Project, req.Kind, req.Name, openRequest{Logs: &req})
	if err != nil {
		return err
	}
	defer sess.stop()
	for {
		m, err := sess.recv(sess.ctx)
		if err != nil {
			return sess.fail(ctx, err)
		}
		switch m.Header.Get(hdrFrame) {
		case frameLogs:
			var lines []LogLine
			if err := json.Unmarshal(m.Data, &lines); err != nil {
				return sess.fail(ctx, fmt.Errorf("decode logs frame: %w", err))
			}
			for _, l := range lines {
				if err := each(l); err != nil {
					return sess.fail(ctx, err)
				}
			}
			sess.consume()
		case frameEnd:
			sess.ended = true
			_, err := endResult(m)
			return err
		default:
			return sess.fail(ctx, fmt.Errorf("unexpected %q frame in a logs session", m.Header.Get(hdrFrame)))
		}
	}
}

// Exec is the package's Exec with c's settings.
func (c *Client) Exec(ctx context.Context, req ExecRequest, s Streams) (int, error) {
	if err := checkWorkload(req.Project, req.Kind, req.Name); err != nil {
		return -1, err
	}
	if len(req.Command) == 0 {
		return -1, Errorf(http.StatusBadRequest, "command is required")
	}
	sess, _, err := c.open(ctx, verbExec, req.Project, req.Kind, req.Name, openRequest{Exec: &req})
	if err != nil {
		return -1, err
	}
	defer sess.stop()
	if req.Stdin {
		go sess.pumpStdin(s.Stdin)
	}
	if req.TTY && s.Resize != nil {
		go sess.pumpResize(s.Resize)
	}
	for {
		m, err := sess.recv(sess.ctx)
		if err != nil {
			return -1, sess.fail(ctx, err)
		}
		switch typ := m.Header.Get(hdrFrame); typ {
		case frameStdout, frameStderr:
			w := s.Stdout
			if typ == frameStderr {
				w = s.Stderr
			}
			if w != nil {
				if _, err := w.Write(m.Data); err != nil {
					return -1, sess.fail(ctx, fmt.Errorf("write %s: %w", typ, err))
				}
			}
			sess.consume()
		case frameEnd:
			sess.ended = true
			return endResult(m)
		default:
			return -1, sess.fail(ctx, fmt.Errorf("unexpected %q frame in an exec session", typ))
		}
	}
}

// clientSession is the client's end of one session.
type clientSession struct {
	*peer
	ctx    context.Context // ends with the caller's context or stop
	cancel context.CancelFunc
	ended  bool // the server's end frame was received
}

func (c *Client) open(ctx context.Context, verb, project, kind, name string, body openRequest) (*clientSession, openReply, error) {
	set := settings{keepalive: c.Keepalive, deadAfter: c.DeadAfter, window: c.Window}
	if set.keepalive <= 0 {
		set.keepalive = DefaultKeepalive
	}
	if set.deadAfter <= 0 {
		set.deadAfter = DefaultDeadAfter
	}
	if set.window <= 0 {
		set.window = DefaultWindow
	}
	set = set.clamp()
	openTimeout := c.OpenTimeout
	if openTimeout <= 0 {
		openTimeout = DefaultOpenTimeout
	}
	id := nuid.Next()
	p, err := newPeer(c.NC, bus.DebugSessionSubject(id, dirDown), bus.DebugSessionSubject(id, dirUp), set)
	if err != nil {
		return nil, openReply{}, err
	}
	body.Session = id
	body.KeepaliveMillis, body.DeadAfterMillis, body.Window = set.keepalive.Milliseconds(), set.deadAfter.Milliseconds(), set.window
	data, err := json.Marshal(body)
	if err != nil {
		p.close()
		return nil, openReply{}, fmt.Errorf("encode open request: %w", err)
	}
	subject := bus.DebugSubject(verb, project, kind, name)
	octx, ocancel := context.WithTimeout(ctx, openTimeout)
	m, err := c.NC.RequestWithContext(octx, subject, data)
	ocancel()
	if err != nil {
		p.close()
		switch {
		case ctx.Err() != nil:
			return nil, openReply{}, ctx.Err()
		case errors.Is(err, nats.ErrNoResponders):
			return nil, openReply{}, Errorf(http.StatusServiceUnavailable, "no debug stream server answers %s", subject)
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			return nil, openReply{}, Errorf(http.StatusServiceUnavailable, "no answer from the debug stream server within %v", openTimeout)
		}
		return nil, openReply{}, fmt.Errorf("open %s session: %w", verb, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		p.close()
		n, _ := strconv.Atoi(code)
		return nil, openReply{}, &Error{Code: n, Message: m.Header.Get(micro.ErrorHeader)}
	}
	var reply openReply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		p.close()
		return nil, openReply{}, fmt.Errorf("decode open reply: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &clientSession{peer: p, ctx: sctx, cancel: cancel}
	go p.pings(sctx)
	return s, reply, nil
}

// fail tells the server the client is going (unless the server ended the
// session) and returns the error to report: the caller's context error when
// that is what ended the session.
func (s *clientSession) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// stop ends the session: a close frame unless the server already ended it.
func (s *clientSession) stop() {
	if !s.ended {
		m := nats.NewMsg(s.out)
		m.Header.Set(hdrFrame, frameClose)
		_ = s.nc.PublishMsg(m)
	}
	s.cancel()
	s.close()
}

func (s *clientSession) pumpStdin(r io.Reader) {
	if r != nil {
		buf := make([]byte, MaxFrame)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if s.send(s.ctx, frameStdin, append([]byte(nil), buf[:n]...), nil, true, true) != nil {
					return
				}
			}
			if err != nil {
				break
			}
		}
	}
	_ = s.send(s.ctx, frameEOF, nil, nil, true, true)
}

func (s *clientSession) pumpResize(ch <-chan TerminalSize) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case size, ok := <-ch:
			if !ok {
				return
			}
			b, _ := json.Marshal(size)
			if s.send(s.ctx, frameResize, b, nil, true, true) != nil {
				return
			}
		}
	}
}

// endResult reads an end frame: the exit code, or the session's error.
func endResult(m *nats.Msg) (int, error) {
	if code := m.Header.Get(hdrErrorCode); code != "" {
		n, _ := strconv.Atoi(code)
		return -1, &Error{Code: n, Message: m.Header.Get(hdrError)}
	}
	exit := 0
	if e := m.Header.Get(hdrExit); e != "" {
		n, err := strconv.Atoi(e)
		if err != nil {
			return -1, fmt.Errorf("bad exit code %q in end frame", e)
		}
		exit = n
	}
	return exit, nil
}

func checkWorkload(project, kind, name string) error {
	for _, f := range []struct{ field, v string }{{"project", project}, {"kind", kind}, {"name", name}} {
		if err := checkToken(f.field, f.v); err != nil {
			return err
		}
	}
	return nil
}
