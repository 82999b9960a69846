package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/debugstream"
	"atoll.dev/services/gateway/auth"
)

// Exec WebSocket channels: the first byte of every binary message.
const (
	chanStdin  = 0
	chanStdout = 1
	chanStderr = 2
	chanExit   = 3
	chanResize = 4
)

// StreamLogs streams the logs of a workload's pods in every cluster,
// proxied by the cluster-facing side over the bus.
func (s *Service) StreamLogs(w http.ResponseWriter, r *http.Request, project, kind, name string, params computeapi.StreamLogsParams) {
	// A file is read by running tail in the container: as exec, it needs
	// the developer role.
	need := auth.RoleViewer
	if params.File != "" {
		need = auth.RoleDeveloper
	}
	key, registered, ok := s.workload(w, r, project, kind, name, need)
	if !ok {
		return
	}
	if params.SinceSeconds < 0 || params.Tail < 0 {
		writeError(w, r, http.StatusBadRequest, "Invalid", "sinceSeconds and tail must not be negative")
		return
	}
	if params.File != "" {
		if err := fileLogParams(params); err != nil {
			writeDebugError(w, r, err)
			return
		}
	}
	release, ok := s.streamSlot(w, r)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.streamsCtx, cancel)
	defer stop()
	plain := strings.HasPrefix(r.Header.Get("Accept"), "text/plain")
	flusher, _ := w.(http.Flusher)
	started := false
	enc := json.NewEncoder(w)
	err := debugstream.Logs(ctx, s.bus.NC, debugstream.LogRequest{
		Project: project, Kind: registered, Name: name, Container: params.Container, Zone: params.Zone, Pod: params.Pod,
		Follow: params.Follow, SinceSeconds: params.SinceSeconds, Tail: params.Tail, File: params.File,
	}, func(l debugstream.LogLine) error {
		if !started {
			started = true
			if plain {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			} else {
				w.Header().Set("Content-Type", "application/x-ndjson")
			}
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusOK)
		}
		var err error
		if plain {
			_, err = fmt.Fprintf(w, "%s/%s %s\n", l.Pod, l.Container, l.Line)
		} else {
			err = enc.Encode(computeapi.LogLine{Cluster: l.Cluster, Pod: l.Pod, Container: l.Container, Time: l.Time, Line: l.Line})
		}
		if flusher != nil && params.Follow {
			flusher.Flush()
		}
		return err
	})
	switch {
	case !started && err != nil && ctx.Err() == nil:
		writeDebugError(w, r, err)
	case !started:
		// No line at all (an empty log): an empty, successful stream.
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	case err != nil && ctx.Err() == nil:
		s.log.Warn("log stream ended", "key", key, "err", err)
	}
}

// ExecShell runs a command in one of a workload's containers over a
// WebSocket, proxied by the cluster-facing side over the bus.
func (s *Service) ExecShell(w http.ResponseWriter, r *http.Request, project, kind, name string, params computeapi.ExecShellParams) {
	if !sameOrigin(r, s.origin) {
		// No WebSocket at all for another site's page, not even a refusal.
		writeError(w, r, http.StatusForbidden, "Forbidden", "exec from another site's page: the Origin must be the gateway's own URL")
		return
	}
	// A browser cannot read a refused upgrade's answer: it gets the refusal
	// over the WebSocket (refuseOverWebSocket).
	answer := w
	var refusal *refusalRecorder
	if browserExec(r) {
		refusal = newRefusalRecorder()
		answer = refusal
	}
	refused := func() {
		if refusal != nil {
			refuseOverWebSocket(w, r, refusal, s.origin)
		}
	}
	it, _, registered, ok := s.workloadItem(answer, r, project, kind, name, auth.RoleDeveloper)
	if !ok {
		refused()
		return
	}
	if platformSidecar(it.JSON, params.Container) {
		writeError(answer, r, http.StatusForbidden, "Forbidden", fmt.Sprintf("container %q is a platform sidecar: no exec into it", params.Container))
		refused()
		return
	} else if initContainer(it.JSON, params.Container) {
		writeError(answer, r, http.StatusForbidden, "Forbidden", fmt.Sprintf("container %q is an init container: exec only into the workload's own containers", params.Container))
		refused()
		return
	}
	if len(params.Command) == 0 {
		writeError(answer, r, http.StatusBadRequest, "Invalid", "command is required")
		refused()
		return
	}
	s.auditExec(r, project, fmt.Sprintf("%s/%s pod=%q container=%q command=%q", registered, name, params.Pod, params.Container, params.Command))
	release, ok := s.streamSlot(answer, r)
	if !ok {
		refused()
		return
	}
	defer release()
	conn, err := websocket.Accept(w, r, acceptOptions(s.origin))
	if err != nil {
		return // Accept has answered
	}
	var reader sync.WaitGroup
	defer reader.Wait() // last: once the connection is closed, its reader ends
	defer func() { _ = conn.CloseNow() }()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	stdinR, stdinW := io.Pipe()
	// Once the session ends nothing reads stdin: unblock the reader below.
	defer stdinR.CloseWithError(io.ErrClosedPipe)
	resize := make(chan debugstream.TerminalSize, 4)
	reader.Go(func() { // client to server: stdin and resizes
		defer stdinW.Close()
		for {
			typ, b, err := conn.Read(ctx)
			if err != nil {
				cancel()
				return
			}
			if typ != websocket.MessageBinary || len(b) == 0 {
				continue
			}
			switch b[0] {
			case chanStdin:
				if !params.Stdin {
					continue // the command has no stdin
				}
				if len(b) == 1 { // an empty stdin message ends the input
					_ = stdinW.Close()
					continue
				}
				if _, err := stdinW.Write(b[1:]); err != nil {
					return
				}
			case chanResize:
				var sz debugstream.TerminalSize
				if json.Unmarshal(b[1:], &sz) == nil {
					select {
					case resize <- sz:
					default:
					}
				}
			}
		}
	})
	var wmu sync.Mutex
	send := func(ch byte, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return conn.Write(ctx, websocket.MessageBinary, append([]byte{ch}, p...))
	}
	stop := context.AfterFunc(s.streamsCtx, cancel) // the gateway is shutting down
	defer stop()
	code, err := debugstream.Exec(ctx, s.bus.NC, debugstream.ExecRequest{
		Project: project, Kind: registered, Name: name, Pod: params.Pod, Container: params.Container,
		Command: params.Command, Stdin: params.Stdin, TTY: params.Tty,
	}, debugstream.Streams{Stdin: stdinR, Stdout: chanWriter{chanStdout, send}, Stderr: chanWriter{chanStderr, send}, Resize: resize})
	if err != nil {
		msg := "the region did not answer"
		var de *debugstream.Error
		if errors.As(err, &de) {
			msg = de.Message
		} else {
			s.log.Warn("exec session failed", "err", err, "project", project, "name", name)
		}
		_ = send(chanStderr, []byte("atoll: "+msg+"\n"))
		conn.Close(websocket.StatusInternalError, truncate(msg, 120))
		return
	}
	_ = send(chanExit, []byte(strconv.Itoa(code)))
	conn.Close(websocket.StatusNormalClosure, "exit "+strconv.Itoa(code))
}

type chanWriter struct {
	ch   byte
	send func(byte, []byte) error
}

func (c chanWriter) Write(p []byte) (int, error) {
	if err := c.send(c.ch, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
