// Package e2e starts the region of an end-to-end test suite under
// services/atoll/e2e: every suite's TestMain is one call to Main, and its
// tests call Need, so every suite starts, logs, stops and audits its
// region the same way.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

// Package is one end-to-end test package's region: Run starts it
// before the package's tests and stops and audits it after them, the same
// way for every package under services/atoll.
type Package struct {
	// Name names the region's directory and the services' log file
	// (atoll-<name>-*).
	Name string
	// Options start the region; Run fills in Dir and Logger.
	Options region.Options
	// LogToStderr sends the services' log to stderr at Warn; by default it
	// goes to a file at Info, kept when a test fails (a frozen cluster or
	// a kill makes the services log a lot).
	LogToStderr bool
	// GatewayUser, when set, connects as the gateway's NATS user under
	// this client name: Env.Client then calls the endpoints that answer
	// only the gateway (admission, quota's get and set, the aggregator's
	// cluster operations), as the gateway itself does.
	GatewayUser string
	// Env holds environment variables set before the region starts (the
	// services read some options from them).
	Env map[string]string
	// Setup, when set, runs once the region is up (e.g. adds nodes); its
	// error fails every test that calls Need.
	Setup func(ctx context.Context, e *Env) error
	// Processes runs every replica as a process of its service's binary
	// (region.Options.Exec), built by Run into the region's directory
	// first: for tests that look at a service's process (its environment,
	// its flags) as production runs it.
	Processes bool
}

// Env is what a started package region gives its tests.
type Env struct {
	Region *region.Region
	// Gateway is the bus as the gateway's user, Client reads as the admin
	// and calls as the gateway (both nil without Package.GatewayUser).
	Gateway *bus.Bus
	Client  *busclient.Client
	// LogPath is the services' log file ("" with LogToStderr).
	LogPath string
}

// started is the test binary's region (one suite per binary): nil under
// -short and until Run started it; setupErr is Package.Setup's error.
var (
	started  *Env
	setupErr error
)

// Main is a suite's whole TestMain: it runs the tests with p's region
// (see Run), calls bind with it first (to set the suite's variables), and
// exits with the code.
func Main(m *testing.M, p Package, bind func(*Env)) {
	os.Exit(Run(m, p, bind))
}

// Need skips t when the suite runs without a region (under -short, or
// with no member-cluster binaries), fails it when Package.Setup failed,
// and returns the region.
func Need(t testing.TB) *Env {
	t.Helper()
	if started == nil {
		t.Skip("end-to-end tests need member clusters (not under -short)")
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return started
}

// Testdata is the absolute path of the suite's testdata/<name> (a KWOK
// stages file for Options.ZoneConfigs); it panics when the working
// directory is unknown, as a TestMain cannot go on without it.
func Testdata(name string) string {
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		panic(err)
	}
	return p
}

// EveryZone is Options.ZoneConfigs giving each of the default zones (a,
// b, c) the suite's testdata/<file>.
func EveryZone(file string) map[string][]string {
	p := Testdata(file)
	return map[string][]string{"a": {p}, "b": {p}, "c": {p}}
}

// Run is a TestMain's body: it starts p's region (three member
// clusters, every service), calls bind with it, runs the tests, then
// stops the region and fails the run when a service stepped outside its
// NATS grant. It returns the exit code. Under -short, or when no test is
// selected (make bench), the tests run without a region: bind is not
// called, and tests that need one skip (Need).
func Run(m *testing.M, p Package, bind func(*Env)) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() || flag.Lookup("test.run").Value.String() == "^$" {
		return m.Run()
	}
	for k, v := range p.Env {
		if err := os.Setenv(k, v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "atoll-"+p.Name+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	e := &Env{}
	level := slog.LevelInfo
	out := os.Stderr
	if p.LogToStderr {
		level = slog.LevelWarn
	} else {
		f, err := os.CreateTemp("", "atoll-"+p.Name+"-*.log")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		out, e.LogPath = f, f.Name()
	}
	if os.Getenv("ATOLL_E2E_DEBUG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))
	if !p.LogToStderr {
		// What logs to the default logger (the bus's breakers) or to klog
		// (client-go in killed replicas) goes to the file too.
		slog.SetDefault(log)
		klog.LogToStderr(false)
		klog.SetOutput(out)
	}
	where := "stderr"
	if e.LogPath != "" {
		where = e.LogPath
	}
	o := p.Options
	o.Dir, o.Logger = dir, log
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if p.Processes {
		start := time.Now()
		o.Exec = filepath.Join(dir, "bin")
		if err := region.BuildServices(ctx, o.Exec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "services built in %v\n", time.Since(start).Round(time.Millisecond))
	}
	start := time.Now()
	e.Region, err = region.Start(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start region:", err, "(log:", where+")")
		return 1
	}
	fmt.Fprintf(os.Stderr, "region of %d replica(s) per service ready in %v; services log to %s\n",
		e.Region.Replicas(), time.Since(start).Round(time.Millisecond), where)
	code := func() int {
		if p.GatewayUser != "" {
			if e.Gateway, err = e.Region.ConnectAs(p.GatewayUser, bus.UserGateway); err != nil {
				fmt.Fprintln(os.Stderr, "connect as the gateway:", err)
				return 1
			}
			defer e.Gateway.Close()
			e.Client = busclient.New(e.Region.Bus, e.Gateway)
		}
		if p.Setup != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			setupErr = p.Setup(sctx, e)
			cancel()
		}
		started = e
		if bind != nil {
			bind(e)
		}
		return m.Run()
	}()
	// Every service kept to its grant (libs/bus Grants) the whole run.
	if !e.Region.StopAndAudit() {
		code = 1
	}
	if e.LogPath != "" {
		if code == 0 && os.Getenv("ATOLL_KEEP_LOG") == "" {
			_ = os.Remove(e.LogPath)
		} else {
			fmt.Fprintln(os.Stderr, "services' log kept in", e.LogPath)
		}
	}
	return code
}
