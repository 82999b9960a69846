package aggregator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"atoll.dev/libs/debugstream"
)

// fileLogs implements a file log: one source per started Pod, each
// following the file in the named container (or the Pod's first main
// container) by running tail there, as exec does.
func (b *debugBackend) fileLogs(ctx context.Context, req debugstream.LogRequest) ([]debugstream.LogSource, error) {
	if err := debugstream.CheckLogFile(req.File); err != nil {
		return nil, err
	}
	if req.SinceSeconds > 0 {
		return nil, debugstream.Errorf(http.StatusBadRequest, "sinceSeconds does not apply to a file log")
	}
	pods, err := b.logPods(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []debugstream.LogSource
	for _, cp := range pods {
		if !cp.pod.running() {
			continue // a file is read by running a command: only in a Running Pod
		}
		container := req.Container
		if mains := cp.pod.mains(); container == "" && len(mains) > 0 {
			container = mains[0].Name.String()
		}
		if execContainer(cp.pod, container) != nil {
			continue // a file is read by running a command: the workload's own containers only
		}
		out = append(out, debugstream.LogSource{
			Cluster: cp.cluster.name, Pod: cp.pod.Name, Container: container,
			Open: cp.cluster.openFile(cp.pod.Namespace.String(), cp.pod.Name, container, req),
		})
	}
	if len(out) == 0 {
		if req.Container != "" {
			return nil, debugstream.Errorf(http.StatusNotFound, "no Running Pod of %s %s has a container %q", req.Kind, req.Name, req.Container)
		}
		return nil, debugstream.Errorf(http.StatusNotFound, "%s %s has no Running Pods", req.Kind, req.Name)
	}
	return out, b.capLogs(req, out)
}

// fileCheck is the command that tells a readable regular file (exit 0)
// from a missing (3) or unreadable (4) one, with POSIX sh and test only.
const fileCheck = `if [ ! -e "$1" ]; then exit 3; fi; if [ ! -f "$1" ]; then exit 5; fi; if [ ! -r "$1" ]; then exit 4; fi`

// openFile returns a function that opens one container's file log: it
// checks the file first (a missing one is a 404), then streams `tail`'s
// output, each line prefixed with the time it was read, as the CRI
// prefixes a container log's.
func (c *debugCluster) openFile(ns, pod, container string, req debugstream.LogRequest) func(context.Context) (io.ReadCloser, error) {
	return func(ctx context.Context) (io.ReadCloser, error) {
		if c.unreachable() {
			return nil, debugstream.Errorf(http.StatusServiceUnavailable, "cluster %s is unreachable", c.name)
		}
		where := fmt.Sprintf("%s/%s", pod, container)
		cctx, cancel := context.WithTimeout(ctx, DebugOpenTimeout)
		var stderr bytes.Buffer
		code, err := c.exec(cctx, ns, pod, container,
			debugstream.ExecRequest{Command: []string{"sh", "-c", fileCheck, "sh", req.File}},
			debugstream.ExecIO{Stdout: io.Discard, Stderr: &stderr})
		cancel()
		switch {
		case err != nil:
			return nil, fmt.Errorf("check %s in %s: %w", req.File, where, err)
		case code == 3:
			return nil, debugstream.Errorf(http.StatusNotFound, "no file %s in %s", req.File, where)
		case code == 4:
			return nil, debugstream.Errorf(http.StatusForbidden, "file %s in %s is not readable", req.File, where)
		case code == 5:
			return nil, debugstream.Errorf(http.StatusBadRequest, "%s in %s is not a regular file", req.File, where)
		case code != 0:
			return nil, debugstream.Errorf(http.StatusBadRequest, "cannot check %s in %s (exit %d): %s", req.File, where, code, truncate(stderr.String(), 200))
		}

		cmd := []string{"tail", "-n", "+1"}
		if req.Tail > 0 {
			cmd = []string{"tail", "-n", strconv.FormatInt(req.Tail, 10)}
		}
		if req.Follow {
			cmd = append(cmd, "-F")
		}
		cmd = append(cmd, "--", req.File)
		pr, pw := io.Pipe()
		sctx, scancel := context.WithCancel(ctx)
		go func() {
			tw := &timestamper{w: pw}
			_, err := c.exec(sctx, ns, pod, container, debugstream.ExecRequest{Command: cmd}, debugstream.ExecIO{Stdout: tw, Stderr: io.Discard})
			if err == nil || errors.Is(sctx.Err(), context.Canceled) {
				err = tw.flush()
			}
			pw.CloseWithError(err)
		}()
		return &cancelOnClose{ReadCloser: pr, cancel: scancel}, nil
	}
}

// timestamper writes each line with the time it was read and a space in
// front (RFC 3339, as the CRI's), buffering a partial line up to
// debugstream.MaxLine.
type timestamper struct {
	w    io.Writer
	part []byte
}

func (t *timestamper) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.part = append(t.part, p...)
			if len(t.part) < debugstream.MaxLine {
				return n, nil
			}
			p = nil
		} else {
			t.part = append(t.part, p[:i]...)
			p = p[i+1:]
		}
		if err := t.flush(); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// flush writes the partial line, if any.
func (t *timestamper) flush() error {
	if len(t.part) == 0 {
		return nil
	}
	line := append([]byte(time.Now().UTC().Format(time.RFC3339Nano)+" "), t.part...)
	t.part = t.part[:0]
	_, err := t.w.Write(append(line, '\n'))
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
