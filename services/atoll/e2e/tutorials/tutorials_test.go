package tutorials

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
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
	nats := natsBinary()
	// Each tutorial's region, and the drift test's (the last), starts
	// while the one before runs (regions).
	regs := newRegions(t)
	type entry struct {
		tut *Tutorial
		err error
		reg *pending
	}
	var tuts []entry
	for _, file := range files {
		var e entry
		src, err := os.ReadFile(file)
		if err == nil {
			e.tut, err = Parse(filepath.Join("docs/tutorials", filepath.Base(file)), src)
		}
		e.err = err
		if err == nil && (!e.tut.NeedsNATS() || nats != "") {
			e.reg = regs.add(filepath.Base(file), e.tut.NeedsNATS())
		}
		tuts = append(tuts, e)
	}
	driftReg := regs.add("drift", false)
	regs.startAfter(-1)
	atoll := buildAtoll(t)
	for i, e := range tuts {
		t.Run(filepath.Base(files[i]), func(t *testing.T) {
			if e.err != nil {
				t.Fatal(e.err)
			}
			if e.reg == nil {
				t.Skipf("%s runs the NATS CLI, and bin/nats is missing (make tools builds it)", e.tut.Path)
			}
			out, err := runTutorial(t, e.reg.claim(t), e.tut, pathDir(t, atoll, nats))
			var f *Failure
			switch {
			case errors.As(err, &f):
				t.Fatal(f)
			case err != nil:
				t.Fatal(err)
			}
			t.Logf("%d command blocks ran:\n%s", len(e.tut.Blocks), out)
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
		out, err := runTutorial(t, driftReg.claim(t), tut, pathDir(t, atoll, ""))
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

// runTutorial runs tut against reg (started for it, with NATS on
// loopback TCP when tut runs the NATS CLI) and returns what Run does.
func runTutorial(t *testing.T, reg *region.Region, tut *Tutorial, bin string) (string, error) {
	t.Helper()
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
	if tut.NeedsNATS() {
		vars["NATS_URL"] = reg.Bus.ClientURL()
	}
	run, cancelRun := context.WithTimeout(context.Background(), tutorialTimeout)
	defer cancelRun()
	start := time.Now()
	out, err := Run(run, tut, t.TempDir(), sessionEnv(bin, t.TempDir(), vars))
	t.Logf("the session ran for %v", time.Since(start).Round(time.Millisecond))
	return out, err
}

// regions start the tutorials' regions one ahead: the region of the
// next tutorial starts while the current one runs. Most of a session is
// waiting (a rollout's bake, a cron's next minute) and most of a
// region's start is work, so the package takes about one start plus the
// sessions instead of a start per session. Each tutorial still has a
// fresh region of its own.
type regions struct {
	t   *testing.T // the test all the regions are for
	dir string     // the regions' directories are under it

	mu  sync.Mutex
	all []*pending // mu must be held
}

// pending is one region of regions, starting or started.
type pending struct {
	rs      *regions
	i       int  // its index in rs.all
	nats    bool // its NATS listens on loopback TCP
	wanted  bool // -run may select its subtest
	started bool // rs.mu must be held
	claimed bool // rs.mu must be held; a test owns it

	done    chan struct{} // closed when the start ended
	reg     *region.Region
	err     error
	took    time.Duration
	logFile *os.File
}

// newRegions makes t's regions; those that started and that no test
// claimed stop when t ends.
func newRegions(t *testing.T) *regions {
	rs := &regions{t: t, dir: t.TempDir()}
	// Registered after TempDir: it runs before the directory goes.
	t.Cleanup(func() {
		rs.mu.Lock()
		var left []*pending
		for _, p := range rs.all {
			if p.started && !p.claimed {
				left = append(left, p)
			}
		}
		rs.mu.Unlock()
		for _, p := range left {
			<-p.done
			if p.reg != nil {
				p.reg.StopAndAudit()
			}
			if p.logFile != nil {
				_ = p.logFile.Close()
				_ = os.Remove(p.logFile.Name())
			}
		}
	})
	return rs
}

// add queues the region of subtest name (with NATS on loopback TCP when
// nats is set, for the NATS CLI).
func (rs *regions) add(name string, nats bool) *pending {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	p := &pending{rs: rs, i: len(rs.all), nats: nats, wanted: runMatches(name), done: make(chan struct{})}
	rs.all = append(rs.all, p)
	return p
}

// runMatches reports whether -run may select subtest name of the test:
// the regions of the subtests it leaves out are not started ahead. A
// pattern it cannot read selects every subtest.
func runMatches(name string) bool {
	f := flag.Lookup("test.run")
	if f == nil {
		return true
	}
	parts := strings.Split(f.Value.String(), "/")
	if len(parts) < 2 {
		return true
	}
	re, err := regexp.Compile(parts[1])
	return err != nil || re.MatchString(name)
}

// start starts p's region in the background, unless it has started.
func (p *pending) start() {
	p.rs.mu.Lock()
	defer p.rs.mu.Unlock()
	if p.started {
		return
	}
	p.started = true
	go p.run(filepath.Join(p.rs.dir, strconv.Itoa(p.i)))
}

// startAfter starts the first region after the i-th that -run may want.
func (rs *regions) startAfter(i int) {
	rs.mu.Lock()
	var next *pending
	for _, p := range rs.all[i+1:] {
		if p.wanted {
			next = p
			break
		}
	}
	rs.mu.Unlock()
	if next != nil {
		next.start()
	}
}

// run starts p's region in dir, its services logging to a file of their own.
func (p *pending) run(dir string) {
	defer close(p.done)
	p.logFile, p.err = os.CreateTemp("", "atoll-tutorial-*.log")
	if p.err != nil {
		return
	}
	log := slog.New(slog.NewTextHandler(p.logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	p.reg, p.err = region.Start(ctx, region.Options{Dir: dir, Logger: log, Nodes: 2, SelfServiceProjects: true, Listen: p.nats})
	p.took = time.Since(start)
}

// claim makes p's region t's, starts the next one, and waits for p's: it
// stops when t ends, and its services' log is kept if t failed.
func (p *pending) claim(t *testing.T) *region.Region {
	t.Helper()
	p.start()
	p.rs.startAfter(p.i)
	p.rs.mu.Lock()
	p.claimed = true
	p.rs.mu.Unlock()
	waited := time.Now()
	<-p.done
	if p.logFile != nil {
		// What logs to klog (client-go's warnings) goes to the file too.
		klog.LogToStderr(false)
		klog.SetOutput(p.logFile)
		t.Cleanup(func() {
			klog.SetOutput(os.Stderr)
			_ = p.logFile.Close()
			if !t.Failed() {
				_ = os.Remove(p.logFile.Name())
			} else {
				t.Logf("services' log kept in %s", p.logFile.Name())
			}
		})
	}
	if p.err != nil {
		t.Fatalf("start region: %v", p.err)
	}
	t.Logf("region ready in %v, %v of it waited for; services log to %s", p.took.Round(time.Millisecond),
		time.Since(waited).Round(time.Millisecond), p.logFile.Name())
	t.Cleanup(func() {
		// Every service kept to its grant the whole run.
		if !p.reg.StopAndAudit() {
			t.Error("a service stepped outside its NATS grant (see the log)")
		}
	})
	return p.reg
}
