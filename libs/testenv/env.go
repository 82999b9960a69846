// Package testenv starts real Kubernetes member clusters for tests,
// benchmarks and `atoll-dev`: etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler with simulated KWOK nodes, created by
// `kwokctl --runtime binary` from the binaries `make tools` builds into bin/.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// Binaries the member clusters are made of, all expected in the bin dir.
var binaries = []string{"kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}

// ErrMissingBinaries says `make tools` has not been run.
var ErrMissingBinaries = errors.New("member-cluster binaries missing: run `make tools`")

// Options configures an environment.
type Options struct {
	// BinDir holds the binaries; default $ATOLL_BIN_DIR, else bin/ at the
	// repository root found above the working directory.
	BinDir string
	// WorkDir is kwokctl's work directory; default <tmp>/atoll-kwok. It is
	// shared by all environments on the machine so that clusters left by a
	// killed process can be found and removed.
	WorkDir string
	// Prefix starts every cluster name (default "atoll").
	Prefix string
	// KeepQPSLimits keeps the components' default client rate limits
	// (20 QPS for the controller-manager); by default they are lifted with
	// --disable-qps-limits, or they become every benchmark's bottleneck.
	KeepQPSLimits bool
	// Logger receives progress; slog.Default() when nil.
	Logger *slog.Logger
	// Nice lowers the CPU priority of the clusters' processes (0..19), as
	// when the region's own services run on machines of their own.
	Nice int
	// BackgroundNice, when above Nice, lowers further the priority of the
	// processes that work behind the API servers: the controller-manager,
	// the scheduler and KWOK's simulated kubelets (which on a real cluster
	// run on the nodes, not beside the API server).
	BackgroundNice int
	// ControllersOff names kube-controller-manager controllers that do not
	// run (e.g. "deployment-controller"): a benchmark of what reaches the
	// API servers leaves out the clusters' own reaction to it, which on a
	// shared machine takes the CPU from what it measures.
	ControllersOff []string
	// OwnSignals says the caller tears the environment down on SIGINT and
	// SIGTERM itself; otherwise testenv does, then lets the signal kill the process.
	OwnSignals bool
	// Debug, when set, makes every Pod's containers serve logs from a file
	// and run exec commands locally (see DebugSim); off by default.
	Debug *DebugSim
	// MetricsServer runs metrics-server in every cluster, with pod usage
	// driven by pod annotations (see metrics.go); off by default.
	MetricsServer bool
	// ServiceAccess joins every cluster as Atoll does a member cluster
	// (access.go): the cluster-facing services' RBAC applied, a kubeconfig
	// of its own per service (Cluster.ServiceKubeconfig), and their
	// requests audited, so Forbidden finds any they were refused.
	ServiceAccess bool
}

// ClusterSpec describes one member cluster to start.
type ClusterSpec struct {
	// Zone is the cluster's failure domain (a, b, c, ...).
	Zone string
	// Name is the cluster's name within the environment (default "zone-<zone>").
	Name string
	// ConfigFiles are extra kwokctl configuration documents (ClusterLogs,
	// ClusterExec, ...), passed with --config.
	ConfigFiles []string
}

// Env is a set of running member clusters.
type Env struct {
	opts     Options
	log      *slog.Logger
	id       string
	Clusters []*Cluster

	debugFile string // kwokctl configuration of opts.Debug, when set
	stopOnce  sync.Once
	stopErr   error

	execWorkDir string // opts.Debug's ExecWorkDir, absolute
	stopSims    func() // stops the pod simulations of opts.Debug
}

var envSeq atomic.Int64

// Start creates the clusters in parallel and waits until each is ready to
// take workloads. On error, whatever was started is torn down.
func Start(ctx context.Context, opts Options, specs ...ClusterSpec) (*Env, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	e := &Env{
		opts: opts,
		log:  opts.Logger.With("component", "testenv"),
		id:   fmt.Sprintf("%s-%d-%d", opts.Prefix, os.Getpid(), envSeq.Add(1)),
	}
	if n, err := SweepStale(ctx, opts); err != nil {
		e.log.Warn("sweep stale clusters", "err", err)
	} else if n > 0 {
		e.log.Info("removed clusters left by dead processes", "count", n)
	}
	for i, s := range specs {
		if s.Name == "" {
			s.Name = "zone-" + s.Zone
		}
		e.Clusters = append(e.Clusters, &Cluster{
			Name:   s.Name,
			Zone:   s.Zone,
			index:  i,
			kwokID: e.id + "-" + s.Name,
			spec:   s,
			env:    e,
		})
	}
	var err error
	if e.debugFile, err = e.writeDebugFile(); err != nil {
		return nil, err
	}
	register(e, !opts.OwnSignals)
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range e.Clusters {
		g.Go(func() error { return c.create(gctx) })
	}
	if err := g.Wait(); err != nil {
		_ = e.Stop(context.Background())
		return nil, err
	}
	if e.debugFile != "" {
		simCtx, cancel := context.WithCancel(context.Background())
		wait, err := e.startPodSims(simCtx, e.execWorkDir)
		if err != nil {
			cancel()
			_ = e.Stop(context.Background())
			return nil, err
		}
		e.stopSims = func() { cancel(); wait() }
	}
	return e, nil
}

func (o *Options) defaults() error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Prefix == "" {
		o.Prefix = "atoll"
	}
	if o.WorkDir == "" {
		o.WorkDir = filepath.Join(os.TempDir(), "atoll-kwok")
	}
	if o.BinDir == "" {
		dir, err := FindBinDir()
		if err != nil {
			return err
		}
		o.BinDir = dir
	}
	var missing []string
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w (in %s: %s)", ErrMissingBinaries, o.BinDir, strings.Join(missing, ", "))
	}
	return nil
}

// FindBinDir returns $ATOLL_BIN_DIR, or the bin/ directory beside the
// go.work file found in the working directory or above it.
func FindBinDir() (string, error) {
	if d := os.Getenv("ATOLL_BIN_DIR"); d != "" {
		return filepath.Abs(d)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return filepath.Join(dir, "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no go.work above the working directory; set ATOLL_BIN_DIR", ErrMissingBinaries)
		}
		dir = parent
	}
}

// Cluster returns the cluster with the given name, or nil.
func (e *Env) Cluster(name string) *Cluster {
	for _, c := range e.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Stop deletes every cluster of the environment and waits until their
// processes are gone. It is safe to call more than once.
func (e *Env) Stop(ctx context.Context) error {
	e.stopOnce.Do(func() {
		unregister(e)
		if e.stopSims != nil {
			e.stopSims()
		}
		var errs []error
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range e.Clusters {
			wg.Go(func() {
				if err := c.delete(ctx); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if e.debugFile != "" {
			_ = os.Remove(e.debugFile)
		}
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}

// kwokctl runs the kwokctl binary with the environment's work directory.
func (o *Options) kwokctl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(o.BinDir, "kwokctl"), args...)
	// kwokctl runs kubectl to wait for a cluster. v0.8 has no
	// --kubectl-binary flag: it takes kubectl from PATH, else from
	// KWOK_KUBECTL_BINARY, else downloads it (retried for the whole --wait
	// where that fails slowly). The bin dir goes first on PATH so the
	// kubectl `make tools` built, of the clusters' version, is the one.
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+o.WorkDir,
		"KWOK_KUBECTL_BINARY="+filepath.Join(o.BinDir, "kubectl"),
		"PATH="+o.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	// kwokctl must not die with a Ctrl-C meant for us before it has cleaned up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kwokctl %s: %w: %s", strings.Join(args, " "), err, lastLines(out, 15))
	}
	return out, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// SweepStale deletes clusters in the work directory whose owning process
// (the pid in the cluster name) is gone, as after a killed test run.
func SweepStale(ctx context.Context, opts Options) (int, error) {
	if err := opts.defaults(); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(filepath.Join(opts.WorkDir, "clusters"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ent := range entries {
		pid, ok := ownerPID(opts.Prefix, ent.Name())
		if !ok || ownerAlive(pid, filepath.Join(opts.WorkDir, "clusters", ent.Name())) {
			continue
		}
		if _, err := opts.kwokctl(ctx, "delete", "cluster", "--name", ent.Name()); err != nil {
			return n, err
		}
		killUnder(filepath.Join(opts.WorkDir, "clusters", ent.Name()))
		n++
	}
	// Kubeconfigs and config files of owners that are gone.
	files, _ := os.ReadDir(opts.WorkDir)
	for _, f := range files {
		if pid, ok := ownerPID(opts.Prefix, f.Name()); ok && f.Type().IsRegular() && !ownerAlive(pid, filepath.Join(opts.WorkDir, f.Name())) {
			_ = os.Remove(filepath.Join(opts.WorkDir, f.Name()))
		}
	}
	return n, nil
}

func ownerPID(prefix, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return 0, false
	}
	pidStr, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	return pid, err == nil
}

// ownerAlive says whether pid is the live process that made path: a process
// that is not a zombie and started no later than path was made (clockSlack
// for the clocks' rounding). A process started after path holds a pid the
// kernel reused, and the owner is gone. It reads /proc, not kill(pid, 0),
// which succeeds on a reused pid. When it cannot tell, it says alive.
func ownerAlive(pid int, path string) bool {
	if pid == os.Getpid() {
		return true
	}
	started, err := processStart(pid)
	if errors.Is(err, errNoProcess) {
		return false
	}
	if err != nil {
		return true
	}
	made, ok := madeBefore(path)
	return !ok || !started.After(made.Add(clockSlack))
}

// clockSlack covers the rounding of a process's start time (clock ticks)
// and of file times against each other.
const clockSlack = time.Second

// userHZ is the unit of /proc/<pid>/stat's start time: USER_HZ, 100 on
// every Linux architecture.
const userHZ = 100

// errNoProcess says a pid has no process, or only a zombie.
var errNoProcess = errors.New("no such process")

// processStart returns when pid started, on the wall clock.
func processStart(pid int) (time.Time, error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return time.Time{}, errNoProcess
	}
	if err != nil {
		return time.Time{}, err
	}
	if isZombie(stat) {
		return time.Time{}, errNoProcess
	}
	// Fields 3 on follow the last ')' (the command name may hold spaces);
	// field 22 is the start time in clock ticks after boot.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return time.Time{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}, err
	}
	upFields := strings.Fields(string(up))
	if len(upFields) == 0 {
		return time.Time{}, errors.New("parse /proc/uptime")
	}
	secs, err := strconv.ParseFloat(upFields[0], 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse /proc/uptime: %w", err)
	}
	boot := time.Now().Add(-time.Duration(secs * float64(time.Second)))
	return boot.Add(time.Duration(ticks) * time.Second / userHZ), nil
}

// madeBefore returns a time no earlier than path was made: the oldest
// modification time of path and, for a directory, of its direct entries
// (each was written after it was made).
func madeBefore(path string) (time.Time, bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return time.Time{}, false
	}
	oldest := fi.ModTime()
	if fi.IsDir() {
		ents, _ := os.ReadDir(path)
		for _, e := range ents {
			if info, err := e.Info(); err == nil && info.ModTime().Before(oldest) {
				oldest = info.ModTime()
			}
		}
	}
	return oldest, true
}

// Processes returns the pids of running processes whose command line
// mentions dir: the member-cluster components started for it.
func Processes(dir string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), dir) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && isZombie(st) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func isZombie(stat []byte) bool {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// killUnder kills, as a last resort, processes still running for dir, and
// waits (up to killWait) until none is left: a process sent SIGKILL is
// still listed until the kernel has torn it down, and one may have been
// starting while the list was read.
func killUnder(dir string) {
	deadline := time.Now().Add(killWait)
	for {
		pids := Processes(dir)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond) // polling the kernel's process table
	}
}

// killWait bounds how long killUnder waits for killed processes to go.
const killWait = 10 * time.Second

// Environments alive in this process, torn down on SIGINT/SIGTERM.
var (
	liveMu   sync.Mutex
	live     = map[*Env]bool{}
	sigOnce  sync.Once
	deadline = 60 * time.Second
)

func register(e *Env, handleSignals bool) {
	liveMu.Lock()
	live[e] = true
	liveMu.Unlock()
	if !handleSignals {
		return
	}
	sigOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-ch
			slog.Warn("signal: tearing down member clusters", "component", "testenv", "signal", sig.String())
			StopAll()
			signal.Stop(ch)
			if s, ok := sig.(syscall.Signal); ok {
				_ = syscall.Kill(os.Getpid(), s)
			}
		}()
	})
}

func unregister(e *Env) {
	liveMu.Lock()
	delete(live, e)
	liveMu.Unlock()
}

// StopAll tears down every environment this process started.
func StopAll() {
	liveMu.Lock()
	envs := make([]*Env, 0, len(live))
	for e := range live {
		envs = append(envs, e)
	}
	liveMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for _, e := range envs {
		_ = e.Stop(ctx)
	}
}
