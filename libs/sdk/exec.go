package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"atoll.dev/libs/computeapi"
)

// The channels of the exec protocol: each binary WebSocket message starts
// with one of these bytes.
const (
	ChannelStdin  byte = 0 // client to server; an empty message ends stdin
	ChannelStdout byte = 1 // server to client
	ChannelStderr byte = 2 // server to client
	ChannelExit   byte = 3 // server to client: the exit code as decimal text
	ChannelResize byte = 4 // client to server: TerminalSize as JSON
)

// TerminalSize is a terminal's size in characters, sent on ChannelResize.
type TerminalSize struct {
	Width  uint16 `json:"width"`
	Height uint16 `json:"height"`
}

// ErrNoExitCode is returned by Exec when the gateway closed the session
// without sending an exit code.
var ErrNoExitCode = errors.New("exec session closed without an exit code")

// Exec runs p.Command in a container of a workload over the gateway's
// WebSocket and returns the command's exit code. stdin (may be nil) is
// copied to the command, its end sent as an empty stdin message; stdout and
// stderr (nil discards) receive the command's output; each size received
// from resize (may be nil) is sent as a terminal resize. p.Stdin is set when
// stdin is given. Exec returns when the command exits or ctx is done; it
// does not wait for a blocked stdin Read.
func (c *Client) Exec(ctx context.Context, project, kind, name string, p computeapi.ExecShellParams, stdin io.Reader, stdout, stderr io.Writer, resize <-chan TerminalSize) (exitCode int, err error) {
	if len(p.Command) == 0 {
		return -1, errors.New("exec: no command")
	}
	if stdin != nil {
		p.Stdin = true
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	req, err := computeapi.NewExecShellRequest(c.server, project, kind, name, &p)
	if err != nil {
		return -1, fmt.Errorf("exec: %w", err)
	}
	c.setHeaders(req.Header)
	dropUnset(req)
	req = req.WithContext(ctx)
	if h := c.doer.hooks.OnRequest; h != nil {
		h(req)
	}
	dctx, dcancel := ctx, context.CancelFunc(func() {})
	if c.doer.timeout > 0 {
		dctx, dcancel = context.WithTimeout(ctx, c.doer.timeout)
	}
	start := time.Now()
	conn, resp, err := websocket.Dial(dctx, req.URL.String(), &websocket.DialOptions{HTTPClient: c.httpc, HTTPHeader: req.Header})
	dcancel()
	if h := c.doer.hooks.OnResponse; h != nil {
		h(req, resp, err, time.Since(start), 1)
	}
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			return -1, errorFromResponse(resp)
		}
		return -1, fmt.Errorf("exec in %s %s: %w", kind, name, err)
	}
	defer func() { _ = conn.CloseNow() }()
	conn.SetReadLimit(4 << 20)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if stdin != nil {
		go pumpStdin(ctx, conn, stdin)
	}
	if resize != nil {
		go pumpResize(ctx, conn, resize)
	}
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return -1, ctx.Err()
			}
			if websocket.CloseStatus(err) != -1 {
				return -1, fmt.Errorf("exec in %s %s: %w (%w)", kind, name, ErrNoExitCode, err)
			}
			return -1, fmt.Errorf("exec in %s %s: %w", kind, name, err)
		}
		if typ != websocket.MessageBinary || len(msg) == 0 {
			continue
		}
		switch msg[0] {
		case ChannelStdout:
			if _, err := stdout.Write(msg[1:]); err != nil {
				return -1, fmt.Errorf("exec: write stdout: %w", err)
			}
		case ChannelStderr:
			if _, err := stderr.Write(msg[1:]); err != nil {
				return -1, fmt.Errorf("exec: write stderr: %w", err)
			}
		case ChannelExit:
			code, err := strconv.Atoi(strings.TrimSpace(string(msg[1:])))
			if err != nil {
				return -1, fmt.Errorf("exec: malformed exit code %q", msg[1:])
			}
			_ = conn.Close(websocket.StatusNormalClosure, "")
			return code, nil
		}
	}
}

// pumpStdin copies r to the session, then sends the end of stdin.
func pumpStdin(ctx context.Context, conn *websocket.Conn, r io.Reader) {
	buf := make([]byte, 32<<10)
	buf[0] = ChannelStdin
	for {
		n, err := r.Read(buf[1:])
		if n > 0 {
			if conn.Write(ctx, websocket.MessageBinary, buf[:1+n]) != nil {
				return
			}
		}
		if err != nil {
			// An empty stdin message: no more input.
			_ = conn.Write(ctx, websocket.MessageBinary, []byte{ChannelStdin})
			return
		}
	}
}

// pumpResize sends each terminal size.
func pumpResize(ctx context.Context, conn *websocket.Conn, sizes <-chan TerminalSize) {
	for {
		select {
		case <-ctx.Done():
			return
		case s, ok := <-sizes:
			if !ok {
				return
			}
			b, _ := json.Marshal(s)
			if conn.Write(ctx, websocket.MessageBinary, append([]byte{ChannelResize}, b...)) != nil {
				return
			}
		}
	}
}
