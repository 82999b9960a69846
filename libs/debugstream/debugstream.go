// Package debugstream streams the logs of a workload's Pods and runs
// interactive exec sessions in them over NATS, so that the gateway needs no
// member-cluster credentials: Logs and Exec are the client side, Server the
// cluster-facing side (the aggregator), which reaches the clusters through
// a Backend.
//
// # Protocol
//
// A session is opened with a request to bus.DebugSubject(verb, project,
// kind, name), verb "logs" or "exec", served by a micro endpoint in a queue
// group so that any server replica may take it. The request (openRequest)
// carries a session id chosen by the client, the request proper and the
// client's keepalive, dead-peer timeout and window. The client subscribes to
// the session's down subject before it asks, and the server to its up
// subject before it answers, so no frame is lost; a refusal is a micro error
// reply (Nats-Service-Error-Code 400, 404, 503, ...), returned as *Error.
//
// Frames then flow on bus.DebugSessionSubject(id, "down") (server to
// client) and bus.DebugSessionSubject(id, "up") (client to server). Every
// frame names its type in the Debug-Frame header:
//
//	down: logs (JSON []LogLine), stdout, stderr (raw bytes), end, ping, ack
//	up:   stdin (raw bytes), eof, resize (JSON TerminalSize), close, ping, ack
//
// Data frames and end carry Debug-Seq, 1, 2, 3, ... per direction; the
// receiver checks that none is missing or out of order (one publisher per
// direction keeps NATS's order; a gap, as after a slow-consumer drop, ends
// the session with ErrFramesLost). Flow control is a window of frames: a
// sender keeps at most Window data frames that the receiver has not yet
// consumed; the receiver reports how many it has consumed, in total, in the
// Debug-Ack header of ack frames (sent every Window/4 frames) and of pings.
// A slow reader therefore stalls the sender, and through it the Kubernetes
// stream, instead of growing a buffer; both ends' buffers are bounded by the
// window.
//
// Both ends ping every Keepalive; an end that hears nothing from its peer
// for DeadAfter ends the session (ErrPeerGone on the client). The server's
// last frame is end: Debug-Exit holds an exec's exit code, or
// Debug-Error-Code and Debug-Error say why the session failed. The client
// sends close when it stops early (its context ended, or its callback
// failed), and the server then ends the session at once.
//
// # Trust
//
// The server believes that whoever opens a session may see the workload's
// logs or run commands in its Pods: the gateway authorises its user first.
// That trust rests on the bus's permissions (libs/bus Grants): only the
// gateway's NATS user may publish to atoll.debug.* and to the sessions' up
// subjects, and only the cluster-facing side may serve them. Because
// JetStream can deliver a message to any subject on another user's behalf
// (a consumer's deliver subject, a direct get's reply), the server also
// refuses open requests whose reply subject is not in an allowed user's
// inbox: ServerOptions.Wrap with bus.Bus.OnlyFrom, as the aggregator sets.
package debugstream

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// LogRequest selects the logs of a workload's Pods across member clusters.
type LogRequest struct {
	// Project, Kind and Name identify the workload; Kind as registered
	// (App, JobSet, Pod).
	Project string `json:"project"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	// Container names one container of the Pods (a platform sidecar too,
	// by its name); "" means every main container of the Pods, without the
	// platform's sidecars and init containers.
	Container string `json:"container,omitempty"`
	// Zone, when set, keeps only the Pods in that zone's clusters; Pod,
	// only the Pod of that name. With Container they narrow a session that
	// would stream more containers than the backend allows.
	Zone string `json:"zone,omitempty"`
	Pod  string `json:"pod,omitempty"`
	// Follow keeps streaming new lines until the caller's context ends.
	Follow bool `json:"follow,omitempty"`
	// SinceSeconds keeps only lines newer than this many seconds; 0 means no limit.
	SinceSeconds int64 `json:"sinceSeconds,omitempty"`
	// Tail keeps the last Tail lines of each container; 0 or less means all lines.
	Tail int64 `json:"tail,omitempty"`
	// Timestamps prefixes each Line with its RFC3339Nano time and a space,
	// as `kubectl logs --timestamps` does; LogLine.Time is set either way.
	Timestamps bool `json:"timestamps,omitempty"`
	// File, when set, is a file inside the container to follow instead of
	// its output (see CheckLogFile); Container "" then means each Pod's
	// first main container.
	File string `json:"file,omitempty"`
}

// LogLine is one line of one container's log.
type LogLine struct {
	// Cluster, Pod and Container say where the line comes from.
	Cluster   string `json:"cluster"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// Time is the line's CRI timestamp when the runtime recorded one.
	Time time.Time `json:"time,omitzero"`
	// Line is the text without its newline. A line longer than MaxLine
	// bytes comes as several LogLines of the same Time.
	Line string `json:"line"`
}

// ExecRequest runs a command in a container of one of a workload's Pods.
type ExecRequest struct {
	// Project, Kind and Name identify the workload.
	Project string `json:"project"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	// Pod names one of the workload's Pods; "" picks the first Running
	// one, by cluster name and then Pod name.
	Pod string `json:"pod,omitempty"`
	// Container names the container; "" picks the Pod's first main container.
	Container string `json:"container,omitempty"`
	// Command is the command and its arguments; required.
	Command []string `json:"command"`
	// Stdin attaches Streams.Stdin to the command's standard input.
	Stdin bool `json:"stdin,omitempty"`
	// TTY gives the command a terminal; its stderr then comes on stdout.
	TTY bool `json:"tty,omitempty"`
}

// TerminalSize is the size of the client's terminal, in characters.
type TerminalSize struct {
	Width  uint16 `json:"width"`
	Height uint16 `json:"height"`
}

// Streams are the client's ends of an exec session.
type Streams struct {
	// Stdin feeds the command's standard input when ExecRequest.Stdin is
	// set; nil means an empty input. Exec may return while a Read on it is
	// still blocked; that Read's data is then dropped.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output; nil discards it.
	Stdout, Stderr io.Writer
	// Resize carries terminal size changes when TTY is set; may be nil.
	Resize <-chan TerminalSize
}

// Error is a refusal by the cluster-facing side: 400 bad request, 404 no
// such workload, Pod or container, 503 member cluster or server unreachable.
type Error struct {
	// Code is HTTP-like.
	Code int `json:"code"`
	// Message says what was refused and why.
	Message string `json:"message"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// Errorf returns an *Error with the given code.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

var (
	// ErrPeerGone says the other end of a session was not heard from for
	// DeadAfter: the server (or, on the server, the client) is gone.
	ErrPeerGone = errors.New("debug session peer gone")
	// ErrFramesLost says frames of a session went missing or came out of order.
	ErrFramesLost = errors.New("debug session frames lost")
	// errClosed is the client's close frame, as the server sees it.
	errClosed = errors.New("debug session closed by the client")
)

// Protocol constants and defaults.
const (
	// MaxFrame bounds the data of one stdout, stderr or stdin frame, and the
	// encoded lines of one logs frame (a single long line may exceed it).
	MaxFrame = 32 << 10
	// MaxLine bounds one LogLine's text.
	MaxLine = 16 << 10
	// DefaultWindow is how many data frames may await consumption per direction.
	DefaultWindow = 32
	// DefaultKeepalive is how often each end pings.
	DefaultKeepalive = 3 * time.Second
	// DefaultDeadAfter is how long an end waits for any frame before it
	// gives the session up.
	DefaultDeadAfter = 12 * time.Second
	// DefaultOpenTimeout bounds the open request.
	DefaultOpenTimeout = 10 * time.Second
)

// Frame headers and types (see the package documentation).
const (
	hdrFrame     = "Debug-Frame"
	hdrSeq       = "Debug-Seq"
	hdrAck       = "Debug-Ack"
	hdrExit      = "Debug-Exit"
	hdrErrorCode = "Debug-Error-Code"
	hdrError     = "Debug-Error"

	frameLogs   = "logs"
	frameStdout = "stdout"
	frameStderr = "stderr"
	frameEnd    = "end"
	frameStdin  = "stdin"
	frameEOF    = "eof"
	frameResize = "resize"
	frameClose  = "close"
	framePing   = "ping"
	frameAck    = "ack"

	verbLogs = "logs"
	verbExec = "exec"
	dirUp    = "up"
	dirDown  = "down"
)

// openRequest is the body of a session's open request.
type openRequest struct {
	// Session is the id the client chose; it names the session's subjects.
	Session string       `json:"session"`
	Logs    *LogRequest  `json:"logs,omitempty"`
	Exec    *ExecRequest `json:"exec,omitempty"`
	// KeepaliveMillis, DeadAfterMillis and Window are the client's
	// settings, used by both ends.
	KeepaliveMillis int64 `json:"keepaliveMillis"`
	DeadAfterMillis int64 `json:"deadAfterMillis"`
	Window          int   `json:"window"`
}

// openReply is the body of a successful open reply.
type openReply struct {
	// Cluster, Pod and Container name an exec's target.
	Cluster   string `json:"cluster,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	// Containers is how many container logs a logs session streams.
	Containers int `json:"containers,omitempty"`
}

// settings are a session's timing and window, as negotiated.
type settings struct {
	keepalive, deadAfter time.Duration
	window               int
}

// clamp bounds the client's settings to what a server accepts.
func (s settings) clamp() settings {
	s.keepalive = min(max(s.keepalive, 20*time.Millisecond), 30*time.Second)
	s.deadAfter = min(max(s.deadAfter, 3*s.keepalive), 2*time.Minute)
	s.window = min(max(s.window, 4), 256)
	return s
}

// checkToken reports whether s can stand as one token of a NATS subject.
func checkToken(field, s string) error {
	if s == "" {
		return Errorf(http.StatusBadRequest, "%s is required", field)
	}
	if strings.ContainsAny(s, ".*> \t\r\n") {
		return Errorf(http.StatusBadRequest, "%s %q is not a valid name", field, s)
	}
	return nil
}
