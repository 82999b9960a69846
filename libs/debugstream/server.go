package debugstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/bus"
)

// Backend finds a workload's containers in the member clusters and reaches
// them. Refusals are *Error values (404 no such workload, Pod or container,
// 400 bad request, 503 cluster unreachable); other errors are reported as 500.
type Backend interface {
	// Logs returns the container logs a request selects.
	Logs(ctx context.Context, req LogRequest) ([]LogSource, error)
	// Exec returns the container a request selects.
	Exec(ctx context.Context, req ExecRequest) (ExecTarget, error)
}

// LogSource is the log of one container.
type LogSource struct {
	Cluster, Pod, Container string
	// Open opens the log as a kubelet serves it with timestamps on: each
	// line starts with its RFC3339Nano time and a space (a line without one
	// is passed on with a zero Time). Follow, Tail and SinceSeconds are
	// Open's to apply. ctx ends the stream.
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// ExecTarget is the container an exec session runs in.
type ExecTarget struct {
	Cluster, Pod, Container string
	// Run runs the request's command with the session's streams and returns
	// its exit code; it returns when the command ends or ctx ends.
	Run func(ctx context.Context, io ExecIO) (exitCode int, err error)
}

// ExecIO are the server's ends of an exec session's streams.
type ExecIO struct {
	// Stdin is the client's input; nil unless the request asked for it.
	Stdin io.Reader
	// Stdout and Stderr forward to the client, blocking while its window is full.
	Stdout, Stderr io.Writer
	// Resize carries the client's terminal sizes; nil unless TTY.
	Resize <-chan TerminalSize
}

// ServerOptions configures a Server.
type ServerOptions struct {
	// Name is the micro service name (default "atoll-debugstream").
	Name string
	// QueueGroup lets replicas share sessions (default "debugstream").
	QueueGroup string
	// MaxSessions bounds concurrent sessions; more are refused with 503
	// (default 256).
	MaxSessions int
	// Logger receives session logs; slog.Default() when nil.
	Logger *slog.Logger
	// Wrap, when set, wraps the handler of each open endpoint: the
	// aggregator answers only the gateway's sessions with
	// func(h micro.HandlerFunc) micro.HandlerFunc { return b.OnlyFrom(h, bus.UserGateway) }.
	Wrap func(micro.HandlerFunc) micro.HandlerFunc
}

// Server serves debug sessions from a Backend.
type Server struct {
	nc      *nats.Conn
	backend Backend
	opts    ServerOptions
	log     *slog.Logger

	svc    micro.Service
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the sessions
	slots  chan struct{}

	handlers sync.WaitGroup // the open requests in flight (bus.Concurrent)
}

// NewServer returns a server for backend on nc; Start serves it.
func NewServer(nc *nats.Conn, backend Backend, o ServerOptions) *Server {
	if o.Name == "" {
		o.Name = "atoll-debugstream"
	}
	if o.QueueGroup == "" {
		o.QueueGroup = "debugstream"
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = 256
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Server{nc: nc, backend: backend, opts: o, log: o.Logger, slots: make(chan struct{}, o.MaxSessions)}
}

// Start registers the open endpoints.
func (s *Server) Start() error {
	s.ctx, s.cancel = context.WithCancel(context.Background())
	svc, err := micro.AddService(s.nc, micro.Config{
		Name: s.opts.Name, Version: "0.1.0", Description: "workload logs and exec streams", QueueGroup: s.opts.QueueGroup,
	})
	if err != nil {
		return fmt.Errorf("register debug stream service: %w", err)
	}
	for _, verb := range []string{verbLogs, verbExec} {
		subj := bus.DebugSubject(verb, "*", "*", "*")
		h := bus.Concurrent(32, &s.handlers, s.handleOpen(verb))
		if s.opts.Wrap != nil {
			h = s.opts.Wrap(h)
		}
		if err := svc.AddEndpoint(verb, h, micro.WithEndpointSubject(subj)); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("register debug stream %s: %w", verb, err)
		}
	}
	s.svc = svc
	// Once the server has the subscriptions, a request finds a responder.
	if err := s.nc.Flush(); err != nil {
		s.Stop()
		return fmt.Errorf("register debug stream service: %w", err)
	}
	return nil
}

// Stop unregisters the endpoints, ends every session (their clients get
// 503) and waits for them.
func (s *Server) Stop() {
	if s.svc != nil {
		_ = s.svc.Stop()
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.handlers.Wait()
	s.wg.Wait()
}

// Sessions returns how many sessions are open.
func (s *Server) Sessions() int { return len(s.slots) }

var errStopping = Errorf(http.StatusServiceUnavailable, "debug stream server stopping")

func (s *Server) handleOpen(verb string) micro.HandlerFunc {
	return func(r micro.Request) {
		var req openRequest
		if err := json.Unmarshal(r.Data(), &req); err != nil {
			respondError(r, Errorf(http.StatusBadRequest, "decode open request: %v", err))
			return
		}
		if err := checkToken("session", req.Session); err != nil {
			respondError(r, err)
			return
		}
		var project, kind, name string
		switch {
		case verb == verbLogs && req.Logs != nil:
			project, kind, name = req.Logs.Project, req.Logs.Kind, req.Logs.Name
		case verb == verbExec && req.Exec != nil:
			project, kind, name = req.Exec.Project, req.Exec.Kind, req.Exec.Name
			if len(req.Exec.Command) == 0 {
				respondError(r, Errorf(http.StatusBadRequest, "command is required"))
				return
			}
		default:
			respondError(r, Errorf(http.StatusBadRequest, "%s open request without its %s request", verb, verb))
			return
		}
		if r.Subject() != bus.DebugSubject(verb, project, kind, name) {
			respondError(r, Errorf(http.StatusBadRequest, "subject %s does not name the requested workload %s/%s/%s", r.Subject(), project, kind, name))
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			respondError(r, Errorf(http.StatusServiceUnavailable, "too many debug sessions (%d)", s.opts.MaxSessions))
			return
		}
		set := settings{
			keepalive: time.Duration(req.KeepaliveMillis) * time.Millisecond,
			deadAfter: time.Duration(req.DeadAfterMillis) * time.Millisecond,
			window:    req.Window,
		}.clamp()
		log := s.log.With("session", req.Session, "verb", verb, "project", project, "kind", kind, "workload", name)
		if verb == verbLogs {
			s.openLogs(r, req, set, log)
		} else {
			s.openExec(r, req, set, log)
		}
	}
}

func (s *Server) release() { <-s.slots }

// newSession subscribes to the session's up subject; it must precede the
// reply, after which the client may send.
func (s *Server) newSession(r micro.Request, req openRequest, set settings) (*serverSession, bool) {
	p, err := newPeer(s.nc, bus.DebugSessionSubject(req.Session, dirUp), bus.DebugSessionSubject(req.Session, dirDown), set)
	if err != nil {
		respondError(r, Errorf(http.StatusInternalServerError, "%v", err))
		return nil, false
	}
	ctx, cancel := context.WithCancelCause(s.ctx)
	return &serverSession{peer: p, ctx: ctx, cancel: cancel}, true
}

func (s *Server) openLogs(r micro.Request, req openRequest, set settings, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	sources, err := s.backend.Logs(ctx, *req.Logs)
	cancel()
	if err == nil && len(sources) == 0 {
		err = Errorf(http.StatusNotFound, "%s %s has no container logs", req.Logs.Kind, req.Logs.Name)
	}
	if err != nil {
		s.release()
		respondError(r, err)
		return
	}
	sess, ok := s.newSession(r, req, set)
	if !ok {
		s.release()
		return
	}
	if err := r.RespondJSON(openReply{Containers: len(sources)}); err != nil {
		sess.close()
		s.release()
		log.Warn("answer debug session open", "err", err)
		return
	}
	log.Info("logs session opened", "containers", len(sources), "follow", req.Logs.Follow)
	s.wg.Go(func() {
		defer s.release()
		start := time.Now()
		lines, err := sess.runLogs(*req.Logs, sources)
		log.Info("logs session ended", "lines", lines, "elapsed", time.Since(start).Round(time.Millisecond), "err", err)
	})
}

func (s *Server) openExec(r micro.Request, req openRequest, set settings, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	target, err := s.backend.Exec(ctx, *req.Exec)
	cancel()
	if err != nil {
		s.release()
		respondError(r, err)
		return
	}
	sess, ok := s.newSession(r, req, set)
	if !ok {
		s.release()
		return
	}
	if err := r.RespondJSON(openReply{Cluster: target.Cluster, Pod: target.Pod, Container: target.Container}); err != nil {
		sess.close()
		s.release()
		log.Warn("answer debug session open", "err", err)
		return
	}
	log = log.With("cluster", target.Cluster, "pod", target.Pod, "container", target.Container)
	log.Info("exec session opened", "command", strings.Join(req.Exec.Command, " "), "stdin", req.Exec.Stdin, "tty", req.Exec.TTY)
	s.wg.Go(func() {
		defer s.release()
		start := time.Now()
		code, err := sess.runExec(*req.Exec, target)
		log.Info("exec session ended", "exit", code, "elapsed", time.Since(start).Round(time.Millisecond), "err", err)
	})
}

// respondError answers an open request with a refusal.
func respondError(r micro.Request, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: http.StatusInternalServerError, Message: err.Error()}
	}
	_ = r.Error(strconv.Itoa(e.Code), e.Message, nil)
}

// serverSession is the server's end of one session.
type serverSession struct {
	*peer
	ctx    context.Context // ends with the server, the client's close or silence
	cancel context.CancelCauseFunc
}

// serve starts the pings and the reader of the client's frames; frames
// other than pings, acks and close go to handle. The session's context is
// cancelled with the reason the client went away.
func (ss *serverSession) serve(handle func(m *nats.Msg) error) {
	go ss.pings(ss.ctx)
	go func() {
		for {
			m, err := ss.recv(ss.ctx)
			if err == nil {
				err = handle(m)
			}
			if err != nil {
				ss.cancel(err)
				return
			}
		}
	}()
}

// end sends the end frame and closes the session.
func (ss *serverSession) end(exit int, err error) {
	defer ss.close()
	defer ss.cancel(nil)
	cause := context.Cause(ss.ctx)
	if errors.Is(cause, errClosed) || errors.Is(cause, ErrPeerGone) || errors.Is(cause, ErrFramesLost) {
		return // the client is gone or was told
	}
	hdr := nats.Header{}
	var e *Error
	switch {
	case err == nil:
		hdr.Set(hdrExit, strconv.Itoa(exit))
	case errors.Is(cause, context.Canceled):
		e = errStopping // the server's context ended
	case errors.As(err, &e):
	default:
		e = &Error{Code: http.StatusInternalServerError, Message: err.Error()}
	}
	if e != nil {
		hdr.Set(hdrErrorCode, strconv.Itoa(e.Code))
		hdr.Set(hdrError, e.Message)
	}
	// The end frame is outside the window: it is the one frame after it.
	_ = ss.send(context.Background(), frameEnd, nil, hdr, true, false)
}

// runLogs streams the sources' lines until each has ended or the session
// ends, and returns how many lines it sent.
func (ss *serverSession) runLogs(req LogRequest, sources []LogSource) (int, error) {
	ss.serve(func(m *nats.Msg) error {
		return fmt.Errorf("unexpected %q frame in a logs session", m.Header.Get(hdrFrame))
	})
	lines := make(chan LogLine, 64)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
		code   int
	)
	for _, src := range sources {
		wg.Go(func() {
			if err := readLog(ss.ctx, src, req.Timestamps, lines); err != nil && ss.ctx.Err() == nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s/%s/%s: %v", src.Cluster, src.Pod, src.Container, err))
				var e *Error
				if code == 0 {
					code = http.StatusServiceUnavailable
					if errors.As(err, &e) {
						code = e.Code
					}
				}
				mu.Unlock()
			}
		})
	}
	go func() { wg.Wait(); close(lines) }()
	sent, err := ss.forwardLines(lines)
	if err != nil {
		ss.cancel(err)
		// Let the readers see the end, so that none is left blocked.
		for range lines {
		}
		ss.end(0, err)
		return sent, err
	}
	if len(failed) > 0 {
		err = &Error{Code: code, Message: fmt.Sprintf("%d of %d container logs failed: %s", len(failed), len(sources), strings.Join(failed, "; "))}
	} else if ss.ctx.Err() != nil {
		err = context.Cause(ss.ctx)
	}
	ss.end(0, err)
	return sent, err
}

// forwardLines sends lines in frames of up to MaxFrame bytes: each frame
// takes the lines that are ready, without waiting for more.
func (ss *serverSession) forwardLines(lines <-chan LogLine) (int, error) {
	sent := 0
	for {
		var first LogLine
		var ok bool
		select {
		case first, ok = <-lines:
		case <-ss.ctx.Done():
			return sent, context.Cause(ss.ctx)
		}
		if !ok {
			return sent, nil
		}
		batch := []LogLine{first}
		size := len(first.Line) + 64
	fill:
		for size < MaxFrame {
			select {
			case l, ok := <-lines:
				if !ok {
					break fill
				}
				batch = append(batch, l)
				size += len(l.Line) + 64
			default:
				break fill
			}
		}
		b, err := json.Marshal(batch)
		if err != nil {
			return sent, fmt.Errorf("encode log lines: %w", err)
		}
		if err := ss.send(ss.ctx, frameLogs, b, nil, true, true); err != nil {
			return sent, err
		}
		sent += len(batch)
	}
}

// readLog reads one container's log into out, line by line.
func readLog(ctx context.Context, src LogSource, timestamps bool, out chan<- LogLine) error {
	rc, err := src.Open(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	// Closing the stream is what unblocks a Read when the session ends.
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	defer stop()
	r := bufio.NewReaderSize(rc, MaxLine)
	var t time.Time
	start := true // at the start of a line, where its timestamp is
	for {
		b, err := r.ReadSlice('\n')
		if len(b) > 0 {
			full := err == nil
			b = bytes.TrimSuffix(b, []byte("\n"))
			text := string(b)
			if start {
				t = time.Time{}
				if ts, rest, ok := strings.Cut(text, " "); ok {
					if parsed, perr := time.Parse(time.RFC3339Nano, ts); perr == nil {
						t = parsed
						if !timestamps {
							text = rest
						}
					}
				}
			}
			l := LogLine{Cluster: src.Cluster, Pod: src.Pod, Container: src.Container, Time: t, Line: text}
			select {
			case out <- l:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			start = full
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		case ctx.Err() != nil:
			return context.Cause(ctx)
		default:
			return fmt.Errorf("read log: %w", err)
		}
	}
}

// runExec runs the target with the session's streams.
func (ss *serverSession) runExec(req ExecRequest, target ExecTarget) (int, error) {
	var (
		stdin  *stdinPipe
		resize chan TerminalSize
	)
	eio := ExecIO{
		Stdout: &frameWriter{ss: ss, typ: frameStdout},
		Stderr: &frameWriter{ss: ss, typ: frameStderr},
	}
	if req.Stdin {
		stdin = &stdinPipe{ss: ss, ch: make(chan []byte, ss.set.window+1), done: ss.ctx.Done()}
		eio.Stdin = stdin
	}
	if req.TTY {
		resize = make(chan TerminalSize, 1)
		eio.Resize = resize
	}
	stdinOpen := req.Stdin
	ss.serve(func(m *nats.Msg) error {
		switch typ := m.Header.Get(hdrFrame); {
		case typ == frameStdin && stdinOpen:
			stdin.ch <- m.Data // never blocks: the client keeps within the window
		case typ == frameEOF && stdinOpen:
			stdinOpen = false
			close(stdin.ch)
			ss.consume()
		case typ == frameResize && resize != nil:
			var size TerminalSize
			if err := json.Unmarshal(m.Data, &size); err != nil {
				return fmt.Errorf("decode resize frame: %w", err)
			}
			// Only the latest size matters.
			select {
			case <-resize:
			default:
			}
			resize <- size
			ss.consume()
		default:
			return fmt.Errorf("unexpected %q frame in an exec session", typ)
		}
		return nil
	})
	code, err := target.Run(ss.ctx, eio)
	if err == nil && ss.ctx.Err() != nil {
		err = context.Cause(ss.ctx)
	}
	ss.end(code, err)
	return code, err
}

// frameWriter sends what is written as stdout or stderr frames.
type frameWriter struct {
	ss  *serverSession
	typ string
}

func (w *frameWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), MaxFrame)]
		if err := w.ss.send(w.ss.ctx, w.typ, append([]byte(nil), chunk...), nil, true, true); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// stdinPipe reads the client's stdin frames; a frame counts as consumed
// once it has been read whole.
type stdinPipe struct {
	ss   *serverSession
	ch   chan []byte
	done <-chan struct{}
	buf  []byte
}

func (p *stdinPipe) Read(b []byte) (int, error) {
	for len(p.buf) == 0 {
		select {
		case data, ok := <-p.ch:
			if !ok {
				return 0, io.EOF
			}
			if len(data) == 0 {
				p.ss.consume()
			}
			p.buf = data
		case <-p.done:
			return 0, io.EOF
		}
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	if len(p.buf) == 0 {
		p.ss.consume()
	}
	return n, nil
}
