package region

// Services as processes (Options.Exec): each replica is its service's own
// binary, the command production runs, started with the configuration a
// container gets (environment variables: the NATS URL over loopback TCP,
// the service user's credentials, the clusters file, a free admin port,
// the gateway's tokens file). Its stderr and stdout go to
// <Dir>/logs/<service>-<replica>.log. StopReplica sends SIGTERM and waits
// for the exit; Kill sends SIGKILL. A process is killed with the test too:
// it gets SIGKILL when the process that started it dies (Pdeathsig).
//
// Each process is told its replica's name (lease.InstanceEnv), so its
// lease holder ids start with it and Holder maps them back to the replica.
// What needs the replicas in this process is not offered in this mode:
// tokens minted after the gateway started are unknown to it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/procfs"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/bus/lease"
	"atoll.dev/libs/daemon/admin"
	"atoll.dev/services/gateway/auth"
	"atoll.dev/services/quota"
)

// BuildServices builds every service's command (atoll.dev/services/<name>/cmd/<name>)
// into dir, one binary per service named after it, for Options.Exec. It
// runs the go command of the toolchain that built this program (or the
// one on PATH) in the current directory, which must be inside the
// project's workspace; a second build is mostly the go command's cache.
func BuildServices(ctx context.Context, dir string) error {
	gocmd, err := goCommand()
	if err != nil {
		return fmt.Errorf("build services: %w", err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, s := range Services {
		args = append(args, "atoll.dev/services/"+s.Name+"/cmd/"+s.Name)
	}
	cmd := exec.CommandContext(ctx, gocmd, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build services: %w\n%s", err, out)
	}
	return nil
}

// process is a replica run as its own process.
type process struct {
	cmd      *exec.Cmd
	adminURL string
	exited   chan struct{} // closed once Wait returned
	log      *os.File
}

// startProcess starts replica id as a process of its service's binary
// and waits until its admin port says it is ready.
func (r *Region) startProcess(ctx context.Context, id Replica) (*process, error) {
	adminAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"ATOLL_NATS_URL="+r.Bus.ClientURL(),
		"ATOLL_NATS_CREDS="+r.NATSAuth.CredentialsFile(id.Service),
		"ATOLL_ADMIN_LISTEN="+adminAddr,
		"ATOLL_LOG_LEVEL="+r.execLogLevel,
		"ATOLL_CLUSTERS="+r.ServiceClustersFile(id.Service),
		"ATOLL_PROFILING=true", // on loopback only
		// The replica's name across restarts, in its lease holder ids
		// (lease.InstanceEnv): Holder maps them back to the replica.
		lease.InstanceEnv+"="+id.String(),
	)
	if id.Service == "quota" {
		env = append(env, "ATOLL_QUOTA_DEFAULT_LIMITS="+quota.FormatLimits(r.quotaCfg.Defaults.Limits),
			"ATOLL_QUOTA_MAX_WORKLOADS="+strconv.FormatInt(r.quotaCfg.Defaults.MaxWorkloads, 10))
	}
	env = append(env, r.kekEnv(id.Service)...)
	env = append(env, r.execEnv...)
	if id.Service == "gateway" {
		tokens, err := r.writeTokensFile()
		if err != nil {
			return nil, err
		}
		listen := r.gatewayConfig(id.Index).Listen
		if strings.HasSuffix(listen, ":0") {
			if listen, err = freeAddr(); err != nil {
				return nil, err
			}
		}
		env = append(env, "ATOLL_GATEWAY_LISTEN="+listen, "ATOLL_GATEWAY_TOKENS="+tokens)
		env = append(env, r.gatewayTLSEnv()...)
		if f := r.gatewayCfg.EventsIssuerFile; f != "" {
			env = append(env, "ATOLL_GATEWAY_EVENTS_ISSUER="+f, "ATOLL_GATEWAY_EVENTS_NATS_URL="+r.gatewayCfg.EventsNATSURL)
		}
		if r.gatewayCfg.SelfServiceProjects {
			env = append(env, "ATOLL_GATEWAY_SELF_SERVICE_PROJECTS=true")
		}
		if n := r.gatewayCfg.MaxProjectsPerUser; n > 0 {
			env = append(env, "ATOLL_GATEWAY_MAX_PROJECTS_PER_USER="+strconv.Itoa(n))
		}
		defer func() {
			r.mu.Lock()
			r.listen[id.Index] = listen
			if id.Index == 0 {
				r.GatewayURL = r.scheme() + listen
			}
			r.mu.Unlock()
		}()
	}
	if err := os.MkdirAll(filepath.Join(r.dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(r.dir, "logs", id.String()+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(r.exec, id.Service)) //nolint:noctx // the region kills its processes itself (Kill, Stop), outliving any one context
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	p := &process{cmd: cmd, adminURL: "http://" + adminAddr, exited: make(chan struct{}), log: logFile}
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	if err := p.waitReady(ctx); err != nil {
		p.kill()
		return nil, fmt.Errorf("start %s: %w (log: %s)", id, err, logFile.Name())
	}
	return p, nil
}

// readyTimeout bounds a process's start, until its /readyz answers 200.
const readyTimeout = 2 * time.Minute

// ReadyPoll is how often a starting process's /readyz is asked: the
// resolution of every start time measured.
const ReadyPoll = 50 * time.Millisecond

func (p *process) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(ReadyPoll)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.adminURL+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited before ready: %s", p.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM and waits for the exit; past ctx, SIGKILL.
func (p *process) stop(ctx context.Context) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if st := p.cmd.ProcessState; st != nil && !st.Success() {
			return fmt.Errorf("exited: %s", st)
		}
		return nil
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("did not stop: %w", ctx.Err())
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// writeTokensFile writes every token minted so far, as digests, to the
// gateways' tokens file, replacing it whole (a rename) so that no reader
// sees half of it.
func (r *Region) writeTokensFile() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock() // the writes in the order of the changes
	path := filepath.Join(r.dir, "gateway-tokens.yaml")
	return path, auth.WriteTokensFile(path, auth.TokensFile{Tokens: r.tokens})
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0") //nolint:noctx // a listen on loopback port 0 does not block
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// freeHostPort returns the host and port of a free loopback address.
func freeHostPort() (host, port string, err error) {
	addr, err := freeAddr()
	if err != nil {
		return "", "", err
	}
	return net.SplitHostPort(addr)
}

// Usage is what a replica run as a process has used, from its own
// /metrics (the Go runtime's and the process's collectors).
type Usage struct {
	Replica Replica
	// PID is its process id.
	PID int
	// CPU is its CPU time since it started (ProcessCPU; where /proc cannot
	// tell, process_cpu_seconds_total, which counts in 10 ms ticks).
	CPU time.Duration
	// HeapBytes is its Go heap in use (go_memstats_heap_alloc_bytes).
	HeapBytes uint64
	// GCs and GCPause are its collections so far and their stop-the-world
	// pauses (go_gc_duration_seconds).
	GCs     uint64
	GCPause time.Duration
}

// Usage reads every running process's Usage. With services in this
// process (no Options.Exec) there is none: the caller measures itself.
func (r *Region) Usage(ctx context.Context) ([]Usage, error) {
	r.mu.Lock()
	var ids []Replica
	var procs []*process
	for id, svc := range r.running {
		if svc.proc != nil {
			ids, procs = append(ids, id), append(procs, svc.proc)
		}
	}
	r.mu.Unlock()
	out := make([]Usage, 0, len(ids))
	var errs []error
	for i, id := range ids {
		u, err := scrapeUsage(ctx, procs[i].adminURL)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
			continue
		}
		u.Replica, u.PID = id, procs[i].cmd.Process.Pid
		if c, err := ProcessCPU(u.PID); err == nil {
			u.CPU = c
		}
		out = append(out, u)
	}
	return out, errors.Join(errs...)
}

func scrapeUsage(ctx context.Context, base string) (Usage, error) {
	families, err := admin.ScrapeFamilies(ctx, base)
	if err != nil {
		return Usage{}, err
	}
	first := func(name string) *dto.Metric {
		if f := families[name]; f != nil && len(f.Metric) > 0 {
			return f.Metric[0]
		}
		return nil
	}
	var u Usage
	if m := first("process_cpu_seconds_total"); m != nil {
		u.CPU = time.Duration(m.GetCounter().GetValue() * float64(time.Second))
	}
	if m := first("go_memstats_heap_alloc_bytes"); m != nil {
		u.HeapBytes = uint64(m.GetGauge().GetValue())
	}
	if m := first("go_gc_duration_seconds"); m != nil {
		u.GCs = m.GetSummary().GetSampleCount()
		u.GCPause = time.Duration(m.GetSummary().GetSampleSum() * float64(time.Second))
	}
	return u, nil
}

// BuildNATSServer builds nats-server, at the version the region's own
// embedded server has (libs/bus's requirement), into dir and returns its
// path.
func BuildNATSServer(ctx context.Context, dir string) (string, error) {
	gocmd, err := goCommand()
	if err != nil {
		return "", fmt.Errorf("build nats-server: %w", err)
	}
	out := filepath.Join(dir, "nats-server")
	cmd := exec.CommandContext(ctx, gocmd, "build", "-o", out, "github.com/nats-io/nats-server/v2")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build nats-server: %w\n%s", err, b)
	}
	return out, nil
}

// startNATSProcess runs the region's NATS server as a process of
// o.NATSExec, on a free loopback port with JetStream in store and the
// region's users, and with its profiling port (prof_port, which serves
// /debug/pprof/) on another, and opens the region's bus on it as the
// admin user.
func (r *Region) startNATSProcess(ctx context.Context, o Options, auth *bus.Auth, store string) (*bus.Bus, error) {
	host, port, err := freeHostPort()
	if err != nil {
		return nil, fmt.Errorf("nats-server address: %w", err)
	}
	profHost, profPort, err := freeHostPort()
	if err != nil {
		return nil, fmt.Errorf("nats-server profiling address: %w", err)
	}
	addr, profAddr := net.JoinHostPort(host, port), net.JoinHostPort(profHost, profPort)
	conf := filepath.Join(o.Dir, "nats-server.conf")
	body := fmt.Sprintf("host: %s\nport: %s\nprof_port: %s\njetstream {\n  store_dir: %q\n}\n%s", host, port, profPort, store, auth.ServerConfig())
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, fmt.Errorf("nats-server configuration: %w", err)
	}
	logf, err := os.Create(filepath.Join(o.Dir, "nats-server.log"))
	if err != nil {
		return nil, fmt.Errorf("nats-server log: %w", err)
	}
	defer logf.Close()                          // the child has its own descriptor
	cmd := exec.Command(o.NATSExec, "-c", conf) //nolint:noctx // the region kills the NATS process itself, outliving any one context
	cmd.Env, cmd.Stdout, cmd.Stderr = append(os.Environ(), o.ExecEnv...), logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nats-server: %w", err)
	}
	r.nats, r.natsProf = cmd, "http://"+profAddr
	b, err := bus.Open(ctx, bus.Config{URL: "nats://" + addr, Name: "atoll-region", NKeyFile: auth.CredentialsFile(bus.UserAdmin), Logger: o.Logger})
	if err != nil {
		r.stopNATSProcess()
		return nil, err
	}
	return b, nil
}

// stopNATSProcess stops the NATS server's process, if the region runs
// one: SIGTERM, then SIGKILL after 10 s.
func (r *Region) stopNATSProcess() {
	cmd := r.nats
	if cmd == nil {
		return
	}
	r.nats, r.natsProf = nil, ""
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// NATSPID is the NATS server process's pid, 0 when the server runs in
// this process.
func (r *Region) NATSPID() int {
	if r.nats == nil || r.nats.Process == nil {
		return 0
	}
	return r.nats.Process.Pid
}

// NATSProfURL is the base URL of the NATS server process's profiling
// port (/debug/pprof/), "" when the server runs in this process.
func (r *Region) NATSProfURL() string {
	return r.natsProf
}

// goCommand is the go command of the toolchain that built this binary,
// or the one on PATH.
func goCommand() (string, error) {
	// The toolchain that built this test binary builds the services too.
	gocmd := filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // SA1019: GOROOT is meaningful here: this binary runs where it was built
	if _, err := os.Stat(gocmd); err == nil {
		return gocmd, nil
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command: %w", err)
	}
	return gocmd, nil
}

// ProcessCPU is the CPU time process pid has run: the sum over its
// threads of /proc/<pid>/task/<tid>/schedstat, in nanoseconds (the
// process's own schedstat counts its first thread only, where a Go
// program does little of its work). A process that has only started (an
// idle service) may have used less than the one clock tick that
// /proc/<pid>/stat and process_cpu_seconds_total count in; that count
// still sets the floor, since it keeps the time of threads that exited.
func ProcessCPU(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	stat, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	threads, err := threadsCPU(pid)
	if err != nil {
		return 0, err
	}
	return max(threads, time.Duration(stat.CPUTime()*float64(time.Second))), nil
}

// threadsCPU sums the schedstat run time of pid's live threads.
func threadsCPU(pid int) (time.Duration, error) {
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		return 0, fmt.Errorf("process %d threads: %w", pid, err)
	}
	var sum time.Duration
	for _, t := range threads {
		// A thread that exits between the listing and its read is left
		// out; ProcessCPU's floor keeps its time.
		if st, err := t.Schedstat(); err == nil {
			sum += time.Duration(st.RunningNanoseconds)
		}
	}
	return sum, nil
}
