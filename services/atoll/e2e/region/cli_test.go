package region_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
)

// atollBinary is the real `atoll` binary, built once by the test.
type atollBinary struct {
	path   string
	config string   // the config file the binary reads and login writes
	env    []string // the process environment, without the user's ATOLL_*
}

// buildAtoll builds ./cmd/atoll into a temporary directory.
func buildAtoll(t *testing.T) *atollBinary {
	t.Helper()
	dir := t.TempDir()
	b := &atollBinary{path: filepath.Join(dir, "atoll"), config: filepath.Join(dir, "home", ".config", "atoll", "config.yaml")}
	start := time.Now()
	build := exec.Command("go", "build", "-o", b.path, "./cmd/atoll")
	build.Dir = "../.." // services/atoll
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/atoll: %v\n%s", err, out)
	}
	t.Logf("built atoll in %v", time.Since(start).Round(time.Millisecond))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ATOLL_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			b.env = append(b.env, kv)
		}
	}
	b.env = append(b.env, "HOME="+filepath.Join(dir, "home"))
	return b
}

// cliResult is one run of the binary.
type cliResult struct {
	stdout, stderr string
	code           int
}

// invoke runs the binary with args and stdin, within 2 minutes; the error
// is one running it at all, not its exit code.
func (b *atollBinary) invoke(stdin string, args ...string) (cliResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.path, args...)
	cmd.Env = b.env
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		return r, fmt.Errorf("atoll %s: %w", strings.Join(args, " "), err)
	}
	return r, nil
}

// run is invoke that logs the run and fails the test if the binary could not run.
func (b *atollBinary) run(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	r, err := b.invoke(stdin, args...)
	t.Logf("$ atoll %s\n%s%s", strings.Join(args, " "), firstLines(r.stdout, 25), r.stderr)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// firstLines cuts s after n lines, for the test's log.
func firstLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "") + fmt.Sprintf("... (%d more lines)\n", len(lines)-n)
}

// stream is a running `atoll` whose standard output is read line by line.
type stream struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
}

// start runs the binary in the background.
func (b *atollBinary) start(t *testing.T, args ...string) *stream {
	t.Helper()
	cmd := exec.Command(b.path, args...)
	cmd.Env = b.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &stream{cmd: cmd, lines: make(chan string, 1000), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("atoll %s: stderr %s", strings.Join(args, " "), stderr.String())
		}
	})
	return s
}

// waitLine returns the first line that has every part, within d.
func (s *stream) waitLine(t *testing.T, d time.Duration, parts ...string) string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l := <-s.lines:
			match := true
			for _, p := range parts {
				match = match && strings.Contains(l, p)
			}
			if match {
				return l
			}
		case <-timeout:
			t.Fatalf("no line with %q within %v", parts, d)
		}
	}
}

// interrupt sends Ctrl-C and returns the exit code.
func (s *stream) interrupt(t *testing.T) int {
	t.Helper()
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10s after Ctrl-C")
	}
	err := s.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// ok runs the binary and fails the test unless it exits 0.
func (b *atollBinary) ok(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	r := b.run(t, stdin, args...)
	if r.code != 0 {
		t.Fatalf("atoll %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// getJSON runs `atoll get ... -o json` into v.
func (b *atollBinary) getJSON(v any, args ...string) error {
	r, err := b.invoke("", append(append([]string{"get"}, args...), "-o", "json")...)
	if err != nil {
		return err
	}
	if r.code != 0 {
		return fmt.Errorf("exit %d: %s", r.code, r.stderr)
	}
	return json.Unmarshal([]byte(r.stdout), v)
}

const cliTwoApps = `# two Apps in one file
apiVersion: atoll.dev/v1
kind: App
metadata:
  name: web
  labels: {team: cli}
spec:
  replicas: 3
  template:
    containers:
      - name: web
        image: busybox:1.37
        resources: {requests: {cpu: 50m, memory: 32Mi}}
---
apiVersion: atoll.dev/v1
kind: App
metadata:
  name: worker
spec:
  replicas: 2
  template:
    containers:
      - name: worker
        image: busybox:1.37
        resources: {requests: {cpu: 50m, memory: 32Mi}}
`

// TestCLI drives the real atoll binary against the region's gateway.
func TestCLI(t *testing.T) {
	e2e.Need(t)
	const project = "cli-team"
	atoll := buildAtoll(t)
	dev := reg.Token("cli-dev", false, map[string]string{project: "developer"})
	viewer := reg.Token("cli-viewer", false, map[string]string{project: "viewer"})
	admin := []string{"--token", reg.AdminToken}
	t.Cleanup(func() {
		atoll.run(t, cliTwoApps, "delete", "-f", "-", "--ignore-not-found", "-p", project, "--token", reg.AdminToken, "--server", reg.GatewayURL)
	})

	t.Run("login writes the config", func(t *testing.T) {
		out := atoll.ok(t, "", "login", "--server", reg.GatewayURL, "--token", dev, "--project", project)
		if !strings.Contains(out, "as cli-dev") || !strings.Contains(out, atoll.config) {
			t.Errorf("login said %q", out)
		}
		st, err := os.Stat(atoll.config)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("config mode %v, want 0600", st.Mode().Perm())
		}
		b, _ := os.ReadFile(atoll.config)
		for _, want := range []string{"server: " + reg.GatewayURL, "project: " + project, "token: "} {
			if !strings.Contains(string(b), want) {
				t.Errorf("config lacks %q:\n%s", want, b)
			}
		}
		r := atoll.run(t, "", "login", "--server", reg.GatewayURL, "--token", "not-a-token")
		if r.code == 0 || !strings.Contains(r.stderr, "401") {
			t.Errorf("login with a bad token: exit %d, stderr %q", r.code, r.stderr)
		}
		out = atoll.ok(t, "", "whoami")
		if !strings.Contains(out, "cli-dev") || !strings.Contains(out, "developer") {
			t.Errorf("whoami:\n%s", out)
		}
	})

	t.Run("apply two documents", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "apps.yaml")
		if err := os.WriteFile(f, []byte(cliTwoApps), 0o644); err != nil {
			t.Fatal(err)
		}
		out := atoll.ok(t, "", "apply", "-f", f)
		for _, want := range []string{"app/web created (project cli-team, generation 1)", "app/worker created (project cli-team, generation 1)"} {
			if !strings.Contains(out, want) {
				t.Errorf("apply output lacks %q:\n%s", want, out)
			}
		}
		// Applying them again, from standard input, updates them.
		var l computeapi.WorkloadList
		if err := json.Unmarshal([]byte(atoll.ok(t, cliTwoApps, "apply", "-f", "-", "-o", "json")), &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 2 || l.Items[0].Metadata.Name != "web" || l.Items[1].Metadata.Name != "worker" {
			t.Errorf("second apply returned %+v", l.Items)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("get shows both", func(t *testing.T) {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var l computeapi.WorkloadList
			if !assert.NoError(ct, atoll.getJSON(&l)) {
				return
			}
			var names []string
			for _, w := range l.Items {
				names = append(names, w.Kind+"/"+w.Metadata.Name)
			}
			if strings.Join(names, " ") != "App/web App/worker" {
				ct.Errorf("workloads %v, want App/web App/worker", names)
			}
		}, 30*time.Second, 250*time.Millisecond)
		var w computeapi.Workload
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			if !assert.NoError(ct, atoll.getJSON(&w, "app", "web")) {
				return
			}
			if w.Status.Phase != "Running" || w.Status.Ready != 3 || len(w.Status.Zones) != 3 {
				ct.Errorf("phase %s, ready %d, zones %v; want Running 3 over 3 zones", w.Status.Phase, w.Status.Ready, w.Status.Zones)
			}
		}, 90*time.Second, 250*time.Millisecond)
		out := atoll.ok(t, "", "get", "apps", "-l", "team=cli")
		if !strings.Contains(out, "web") || strings.Contains(out, "worker") || !strings.Contains(out, "a:1/1 b:1/1 c:1/1") {
			t.Errorf("get apps -l team=cli:\n%s", out)
		}
	})

	t.Run("describe", func(t *testing.T) {
		out := atoll.ok(t, "", "describe", "app", "web")
		for _, want := range []string{"Name:", "web", "Project:", project, "Phase:", "Running", "Zones:", "Clusters:", "Events:", "admitted", "scheduled"} {
			if !strings.Contains(out, want) {
				t.Errorf("describe lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("scale", func(t *testing.T) {
		out := atoll.ok(t, "", "scale", "app", "web", "--replicas", "6")
		if !strings.Contains(out, "app/web scaled to 6") {
			t.Errorf("scale said %q", out)
		}
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var w computeapi.Workload
			if !assert.NoError(ct, atoll.getJSON(&w, "app", "web")) {
				return
			}
			if w.Status.Phase != "Running" || w.Status.Desired != 6 || w.Status.Ready != 6 {
				ct.Errorf("phase %s, %d/%d ready, want Running 6/6", w.Status.Phase, w.Status.Ready, w.Status.Desired)
			}
		}, 90*time.Second, 250*time.Millisecond)
	})

	t.Run("events", func(t *testing.T) {
		var l computeapi.EventList
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			r, err := atoll.invoke("", "events", "app", "web", "-o", "json")
			if !assert.NoError(ct, err) {
				return
			}
			if r.code != 0 {
				ct.Errorf("exit %d: %s", r.code, r.stderr)
				return
			}
			l = computeapi.EventList{}
			if !assert.NoError(ct, json.Unmarshal([]byte(r.stdout), &l)) {
				return
			}
			seen := map[string]bool{}
			for _, e := range l.Items {
				seen[e.Event] = true
			}
			for _, want := range []string{"admitted", "scheduled", "propagated", "running", "scaled"} {
				if !seen[want] {
					ct.Errorf("events %v lack %s", seen, want)
					return
				}
			}
		}, 30*time.Second, 250*time.Millisecond)
		for i := 1; i < len(l.Items); i++ {
			if l.Items[i].Id <= l.Items[i-1].Id {
				t.Errorf("event ids out of order: %d after %d", l.Items[i].Id, l.Items[i-1].Id)
			}
		}
		out := atoll.ok(t, "", "events", "app", "web")
		if !strings.HasPrefix(out, "ID") || !strings.Contains(out, "admitted") {
			t.Errorf("events table:\n%s", out)
		}
	})

	t.Run("quota", func(t *testing.T) {
		out := atoll.ok(t, "", "quota")
		for _, want := range []string{"TIER", "Reserved", "OnDemand", "Preemptible"} {
			if !strings.Contains(out, want) {
				t.Errorf("quota lacks %q:\n%s", want, out)
			}
		}
		r := atoll.run(t, "", "quota", "--set", "OnDemand", "--cpu", "100")
		if r.code == 0 || !strings.Contains(r.stderr, "403") {
			t.Errorf("a developer set quota: exit %d, stderr %q", r.code, r.stderr)
		}
		var q computeapi.Quota
		out = atoll.ok(t, "", append([]string{"quota", "--set", "ondemand", "--cpu", "100", "--memory", "200Gi", "--pods", "50", "-o", "json"}, admin...)...)
		if err := json.Unmarshal([]byte(out), &q); err != nil {
			t.Fatal(err)
		}
		var got computeapi.Resources
		for _, tq := range q.Tiers {
			if tq.Tier == "OnDemand" {
				got = tq.Limit
			}
		}
		if got.MilliCPU != 100000 || got.MemoryBytes != 200<<30 || got.Pods != 50 {
			t.Errorf("OnDemand limit %+v, want 100 CPU, 200Gi, 50 pods", got)
		}
		// Scaling beyond the pod limit is refused, with the broken limit named.
		r = atoll.run(t, "", "scale", "app", "web", "--replicas", "60")
		if r.code == 0 || !strings.Contains(r.stderr, "QuotaExceeded") {
			t.Errorf("scale beyond quota: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("a viewer may not delete", func(t *testing.T) {
		r := atoll.run(t, "", "delete", "app", "worker", "--token", viewer)
		if r.code == 0 || !strings.Contains(r.stderr, "403") || !strings.Contains(r.stderr, "Forbidden") {
			t.Errorf("viewer delete: exit %d, stderr %q", r.code, r.stderr)
		}
		// But may read.
		atoll.ok(t, "", "get", "app", "worker", "--token", viewer)
	})

	t.Run("invalid document", func(t *testing.T) {
		r := atoll.run(t, "kind: App\nmetadata: {name: Bad_Name}\nspec: {replicas: -1, template: {containers: []}}\n", "apply", "-f", "-")
		if r.code != 1 || !strings.Contains(r.stderr, "Invalid") || !strings.Contains(r.stderr, "spec.replicas") || !strings.Contains(r.stderr, "metadata.name") {
			t.Errorf("invalid apply: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("logs", func(t *testing.T) {
		marker := fmt.Sprintf("cli-logs %d", time.Now().UnixNano())
		if err := testenv.AppendLog(reg.PodLogFile, marker); err != nil {
			t.Fatal(err)
		}
		out := atoll.ok(t, "", "logs", "app", "web", "--tail", "5")
		clusters := map[string]bool{}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasSuffix(l, "] "+marker) {
				clusters[strings.SplitN(strings.TrimPrefix(l, "["), "/", 2)[0]] = true
			}
		}
		if len(clusters) != 3 {
			t.Errorf("marker from clusters %v, want all 3:\n%s", clusters, out)
		}
		out = atoll.ok(t, "", "logs", "app", "web", "--tail", "1", "-o", "json")
		var l computeapi.LogLine
		if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &l); err != nil || l.Container != "web" || l.Line != marker {
			t.Errorf("logs -o json: %v %+v\n%s", err, l, out)
		}
	})

	t.Run("exec", func(t *testing.T) {
		r := atoll.run(t, "", "exec", "app", "web", "--", "sh", "-c", "echo out; echo oops >&2; exit 3")
		if r.code != 3 || r.stdout != "out\n" || !strings.Contains(r.stderr, "oops") {
			t.Errorf("exec: exit %d, stdout %q, stderr %q; want 3, out, oops", r.code, r.stdout, r.stderr)
		}
		r = atoll.run(t, "echo hi; exit 0\n", "exec", "-i", "app", "web", "--", "sh")
		if r.code != 0 || r.stdout != "hi\n" {
			t.Errorf("exec -i sh: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("events and logs follow", func(t *testing.T) {
		watch := atoll.start(t, "events", "app", "worker", "-w", "-o", "json")
		watch.waitLine(t, 30*time.Second, `"event":"admitted"`)
		atoll.ok(t, "", "pause", "app", "worker")
		watch.waitLine(t, 30*time.Second, `"event":"paused"`)
		atoll.ok(t, "", "resume", "app", "worker")
		watch.waitLine(t, 30*time.Second, `"event":"resumed"`)
		if code := watch.interrupt(t); code != 0 {
			t.Errorf("events -w exited %d after Ctrl-C, want 0", code)
		}
		// web's six pods: each stream opens with its last line, then follows.
		follow := atoll.start(t, "logs", "app", "web", "-f", "--tail", "1")
		for range 6 {
			follow.waitLine(t, 30*time.Second, "[zone-")
		}
		marker := fmt.Sprintf("cli-follow %d", time.Now().UnixNano())
		if err := testenv.AppendLog(reg.PodLogFile, marker); err != nil {
			t.Fatal(err)
		}
		pods := map[string]bool{}
		for len(pods) < 6 {
			l := follow.waitLine(t, 30*time.Second, "] "+marker)
			pods[strings.SplitN(l, "/", 3)[1]] = true
		}
		if code := follow.interrupt(t); code != 0 {
			t.Errorf("logs -f exited %d after Ctrl-C, want 0", code)
		}
	})

	t.Run("clusters", func(t *testing.T) {
		out := atoll.ok(t, "", append([]string{"clusters"}, admin...)...)
		if n := strings.Count(out, "zone-"); n < 3 {
			t.Errorf("clusters:\n%s", out)
		}
		r := atoll.run(t, "", "clusters")
		if r.code == 0 || !strings.Contains(r.stderr, "403") {
			t.Errorf("a developer listed clusters: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("delete", func(t *testing.T) {
		out := atoll.ok(t, "", "delete", "app", "web")
		if !strings.Contains(out, "app/web deleted") {
			t.Errorf("delete said %q", out)
		}
		out = atoll.ok(t, cliTwoApps, "delete", "-f", "-", "--ignore-not-found")
		if !strings.Contains(out, "app/worker deleted") {
			t.Errorf("delete -f said %q", out)
		}
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			r, err := atoll.invoke("", "get", "app", "web")
			if assert.NoError(ct, err) && (r.code == 0 || !strings.Contains(r.stderr, "404")) {
				ct.Errorf("get after delete: exit %d, stderr %q", r.code, r.stderr)
			}
		}, 30*time.Second, 250*time.Millisecond)
	})
}
