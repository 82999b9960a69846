package region_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/debugstream"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
)

// TestDebug streams the logs of an App's Pods across the three member
// clusters and runs commands in them, through the bus and the aggregator,
// against KWOK's simulated kubelets (every container logs the region's
// PodLogFile; exec runs locally).
func TestDebug(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project, name = "debug-team", "shell"
	if _, err := cl.Submit(ctx, appDoc(project, name, 3, "busybox:1.37")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), project, api.KindApp, name) })
	waitZones(t, api.Key(project, api.KindApp, name), map[string]int32{"a": 1, "b": 1, "c": 1}, "")

	// The Pods as the member clusters list them: cluster -> pod.
	want := map[string]string{}
	for _, c := range reg.Env.Clusters {
		pods, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			want[c.Name] = p.Name
		}
	}
	if len(want) != 3 {
		t.Fatalf("pods per cluster %v, want one in each of 3 clusters", want)
	}
	nc := gwBus.NC // debug sessions answer only the gateway's user
	logReq := debugstream.LogRequest{Project: project, Kind: api.KindApp, Name: name}

	t.Run("logs", func(t *testing.T) {
		marker := fmt.Sprintf("debug-logs %d", time.Now().UnixNano())
		if err := testenv.AppendLog(reg.PodLogFile, marker); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{} // cluster -> pod
		seen := map[string]bool{}  // pods that logged the marker
		err := debugstream.Logs(ctx, nc, logReq, func(l debugstream.LogLine) error {
			got[l.Cluster] = l.Pod
			if l.Container != "web" {
				return fmt.Errorf("line from container %q, want only the main container web", l.Container)
			}
			if l.Time.IsZero() {
				return fmt.Errorf("line %q without its CRI time", l.Line)
			}
			if l.Line == marker {
				seen[l.Pod] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("lines from %v, want from %v", got, want)
		}
		if len(seen) != 3 {
			t.Errorf("marker line from %d pods %v, want 3", len(seen), seen)
		}
	})

	t.Run("logs-follow", func(t *testing.T) {
		before := fmt.Sprintf("debug-before %d", time.Now().UnixNano())
		if err := testenv.AppendLog(reg.PodLogFile, before); err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var mu sync.Mutex
		seen := map[string]map[string]bool{} // line -> pods
		done := make(chan error, 1)
		req := logReq
		req.Follow, req.Tail = true, 1
		go func() {
			done <- debugstream.Logs(fctx, nc, req, func(l debugstream.LogLine) error {
				mu.Lock()
				defer mu.Unlock()
				if seen[l.Line] == nil {
					seen[l.Line] = map[string]bool{}
				}
				seen[l.Line][l.Pod] = true
				return nil
			})
		}()
		fromAll := func(line string) func(*assert.CollectT) {
			return func(ct *assert.CollectT) {
				mu.Lock()
				defer mu.Unlock()
				assert.Len(ct, seen[line], 3, "pods that sent %q", line)
			}
		}
		// Tail 1: each stream starts with the last line; then all three are open.
		require.EventuallyWithT(t, fromAll(before), 20*time.Second, 250*time.Millisecond)
		after := fmt.Sprintf("debug-after %d", time.Now().UnixNano())
		if err := testenv.AppendLog(reg.PodLogFile, after); err != nil {
			t.Fatal(err)
		}
		require.EventuallyWithT(t, fromAll(after), 20*time.Second, 250*time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Logs returned %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Logs still running 5s after its context ended")
		}
	})

	exec := func(t *testing.T, req debugstream.ExecRequest, stdin string) (int, string, string) {
		t.Helper()
		req.Project, req.Kind, req.Name = project, api.KindApp, name
		var stdout, stderr bytes.Buffer
		s := debugstream.Streams{Stdout: &stdout, Stderr: &stderr}
		if stdin != "" {
			req.Stdin, s.Stdin = true, strings.NewReader(stdin)
		}
		ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		code, err := debugstream.Exec(ectx, nc, req, s)
		if err != nil {
			t.Fatalf("exec %q: %v", req.Command, err)
		}
		return code, stdout.String(), stderr.String()
	}
	tests := []struct {
		name       string
		req        debugstream.ExecRequest
		stdin      string
		code       int
		stdout     string
		stderrPart string
	}{
		{"echo", debugstream.ExecRequest{Command: []string{"echo", "hello"}}, "", 0, "hello\n", ""},
		{"exit code", debugstream.ExecRequest{Command: []string{"sh", "-c", "exit 3"}}, "", 3, "", ""},
		{"stderr apart", debugstream.ExecRequest{Command: []string{"sh", "-c", "echo out; echo oops >&2; exit 1"}}, "", 1, "out\n", "oops"},
		{"interactive sh", debugstream.ExecRequest{Command: []string{"sh"}}, "echo hi; exit 0\n", 0, "hi\n", ""},
		{"named pod and container", debugstream.ExecRequest{Command: []string{"echo", "there"}, Pod: want["zone-b"], Container: "web"}, "", 0, "there\n", ""},
	}
	for _, tc := range tests {
		t.Run("exec "+tc.name, func(t *testing.T) {
			code, stdout, stderr := exec(t, tc.req, tc.stdin)
			if code != tc.code || stdout != tc.stdout || !strings.Contains(stderr, tc.stderrPart) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q", code, stdout, stderr, tc.code, tc.stdout, tc.stderrPart)
			}
		})
	}
	// KWOK's simulated terminal needs stdin attached, and loses what a
	// command writes just before it exits: the command lingers a moment.
	t.Run("exec tty and resize", func(t *testing.T) {
		stdin, stdinW := io.Pipe()
		defer stdinW.Close()
		resize := make(chan debugstream.TerminalSize, 1)
		resize <- debugstream.TerminalSize{Width: 100, Height: 30}
		var stdout bytes.Buffer
		ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		code, err := debugstream.Exec(ectx, nc, debugstream.ExecRequest{
			Project: project, Kind: api.KindApp, Name: name, Stdin: true, TTY: true,
			Command: []string{"sh", "-c", "sleep 0.3; test -t 0 && echo on-a-tty; stty size; sleep 0.3"},
		}, debugstream.Streams{Stdin: stdin, Stdout: &stdout, Resize: resize})
		if err != nil {
			t.Fatal(err)
		}
		if want := "on-a-tty\r\n30 100\r\n"; code != 0 || stdout.String() != want {
			t.Errorf("exit %d, stdout %q; want 0 and %q", code, stdout.String(), want)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		nop := func(debugstream.LogLine) error { return nil }
		cases := []struct {
			name string
			call func() error
			code int
		}{
			{"logs of an unknown workload", func() error {
				return debugstream.Logs(ctx, nc, debugstream.LogRequest{Project: project, Kind: api.KindApp, Name: "nope"}, nop)
			}, http.StatusNotFound},
			{"exec in an unknown workload", func() error {
				_, err := debugstream.Exec(ctx, nc, debugstream.ExecRequest{Project: project, Kind: api.KindApp, Name: "nope", Command: []string{"true"}}, debugstream.Streams{})
				return err
			}, http.StatusNotFound},
			{"logs of an unknown container", func() error {
				return debugstream.Logs(ctx, nc, debugstream.LogRequest{Project: project, Kind: api.KindApp, Name: name, Container: "nope"}, nop)
			}, http.StatusNotFound},
			{"exec in an unknown pod", func() error {
				_, err := debugstream.Exec(ctx, nc, debugstream.ExecRequest{Project: project, Kind: api.KindApp, Name: name, Pod: "nope", Command: []string{"true"}}, debugstream.Streams{})
				return err
			}, http.StatusNotFound},
			{"unknown kind", func() error {
				return debugstream.Logs(ctx, nc, debugstream.LogRequest{Project: project, Kind: "Gadget", Name: name}, nop)
			}, http.StatusBadRequest},
		}
		for _, tc := range cases {
			var de *debugstream.Error
			if err := tc.call(); !errors.As(err, &de) || de.Code != tc.code {
				t.Errorf("%s: %v, want *Error %d", tc.name, err, tc.code)
			}
		}
	})
}
