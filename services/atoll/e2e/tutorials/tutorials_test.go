package tutorials

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"atoll.dev/services/atoll/region"
)

// tutorialsDir holds the tutorials, from this package's directory.
const tutorialsDir = "../../../../docs/tutorials"

// tutorialTimeout bounds one tutorial's session.
const tutorialTimeout = 10 * time.Minute

// TestTutorials runs every docs/tutorials/*.md against a fresh region of
// its own, as a user following it would: a command that fails, or a
// tutorial that no longer parses, fails the tutorial's subtest, naming
// the file, the command's line and the block's output.
func TestTutorials(t *testing.T) {
	if testing.Short() {
		t.Skip("the tutorials run against a region of member clusters (not under -short)")
	}
	files, err := filepath.Glob(filepath.Join(tutorialsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no tutorials in %s", tutorialsDir)
	}
	atoll := buildAtoll(t)
	nats := natsBinary()
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			tut, err := Parse(filepath.Join("docs/tutorials", filepath.Base(file)), src)
			if err != nil {
				t.Fatal(err)
			}
			if tut.NeedsNATS() && nats == "" {
				t.Skipf("%s runs the NATS CLI, and bin/nats is missing (make tools builds it)", tut.Path)
			}
			out, err := runTutorial(t, tut, pathDir(t, atoll, nats))
			var f *Failure
			switch {
			case errors.As(err, &f):
				t.Fatal(f)
			case err != nil:
				t.Fatal(err)
			}
			t.Logf("%d command blocks ran:\n%s", len(tut.Blocks), out)
		})
	}
	// The runner catches drift: the first tutorial with its scale's
	// --replicas changed to a flag the CLI lacks fails at that line,
	// after the commands before it ran against the region.
	t.Run("drift", func(t *testing.T) {
		src, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		tut, err := Parse(filepath.Join("docs/tutorials", filepath.Base(files[0])), src)
		if err != nil {
			t.Fatal(err)
		}
		line, command := 0, ""
		for i, b := range tut.Blocks {
			lines := strings.Split(b.Text, "\n")
			for j, l := range lines {
				if line == 0 && strings.HasPrefix(l, "atoll scale ") && strings.Contains(l, " --replicas ") {
					line, command = b.Line+j, strings.Replace(l, " --replicas ", " --replica ", 1)
					lines[j] = command
					tut.Blocks[i].Text = strings.Join(lines, "\n")
				}
			}
		}
		if line == 0 {
			t.Fatalf("%s has no `atoll scale ... --replicas N` line to change", tut.Path)
		}
		out, err := runTutorial(t, tut, pathDir(t, atoll, ""))
		var f *Failure
		if !errors.As(err, &f) {
			t.Fatalf("%s with %q passed (%v); want it to fail at line %d:\n%s", tut.Path, command, err, line, out)
		}
		if f.Line != line || f.Command != command || !strings.Contains(f.Output, "unknown flag: --replica") {
			t.Errorf("failure at %d (%q), output %q; want line %d (%q), unknown flag: --replica", f.Line, f.Command, f.Output, line, command)
		}
		t.Logf("the runner said:\n%v", f)
	})
}

// runTutorial starts a region, runs tut against it, and returns what
// Run does; the region stops when t ends, and the services' log is kept
// if t failed.
func runTutorial(t *testing.T, tut *Tutorial, bin string) (string, error) {
	t.Helper()
	logFile, err := os.CreateTemp("", "atoll-tutorial-*.log")
	if err != nil {
		t.Fatal(err)
	}
	// What logs to klog (client-go's warnings) goes to the file too.
	klog.LogToStderr(false)
	klog.SetOutput(logFile)
	t.Cleanup(func() {
		klog.SetOutput(os.Stderr)
		_ = logFile.Close()
		if !t.Failed() {
			_ = os.Remove(logFile.Name())
		} else {
			t.Logf("services' log kept in %s", logFile.Name())
		}
	})
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	// A tutorial that runs the NATS CLI reaches the region's NATS over
	// loopback TCP (NATS_URL).
	nats := tut.NeedsNATS()
	reg, err := region.Start(ctx, region.Options{Dir: t.TempDir(), Logger: log, Nodes: 2, SelfServiceProjects: true, Listen: nats})
	if err != nil {
		t.Fatalf("start region: %v (log: %s)", err, logFile.Name())
	}
	t.Logf("region ready in %v; services log to %s", time.Since(start).Round(time.Millisecond), logFile.Name())
	t.Cleanup(func() {
		// Every service kept to its grant the whole run.
		if !reg.StopAndAudit() {
			t.Error("a service stepped outside its NATS grant (see the log)")
		}
	})
	alice := reg.Token("alice", false, nil)
	vars := map[string]string{
		"ATOLL_SERVER": reg.GatewayURL,
		"ADMIN_TOKEN":  reg.AdminToken,
		"ALICE_TOKEN":  alice,
		"BOB_TOKEN":    reg.Token("bob", false, nil),
		"ATOLL_TOKEN":  alice,
	}
	if reg.CAFile != "" {
		vars["ATOLL_CA"] = reg.CAFile
	}
	if nats {
		vars["NATS_URL"] = reg.Bus.ClientURL()
	}
	run, cancelRun := context.WithTimeout(context.Background(), tutorialTimeout)
	defer cancelRun()
	start = time.Now()
	out, err := Run(run, tut, t.TempDir(), sessionEnv(bin, t.TempDir(), vars))
	t.Logf("the session ran for %v", time.Since(start).Round(time.Millisecond))
	return out, err
}
