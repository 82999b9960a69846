package daemon_test

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx/fxevent"

	"atoll.dev/libs/daemon"
)

// settings is a command with one flag of each kind, the way a service's
// main defines its own.
type settings struct {
	listen string
	rate   float64
	burst  int
	wait   time.Duration
	strict bool
}

func command(s *settings) daemon.Command {
	return daemon.Command{
		Service: "svc", About: "a test service", Clusters: true,
		Flags: func(f *daemon.FlagSet) {
			f.String(&s.listen, "listen", "ATOLL_SVC_LISTEN", "127.0.0.1:8080", "HTTP address")
			f.Float64(&s.rate, "rate", "ATOLL_SVC_RATE", 50, "requests per second")
			f.Int(&s.burst, "burst", "ATOLL_SVC_BURST", 100, "burst")
			f.Duration(&s.wait, "wait", "ATOLL_SVC_WAIT", time.Second, "wait")
			f.Bool(&s.strict, "strict", "ATOLL_SVC_STRICT", false, "strict")
		},
	}
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// A flag wins over its variable, the variable over the default, for the
// shared settings and a service's own alike.
func TestParseFlagEnvDefault(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want settings
		cfg  daemon.Config
	}{
		{
			name: "defaults",
			want: settings{listen: "127.0.0.1:8080", rate: 50, burst: 100, wait: time.Second},
			cfg:  daemon.Config{Service: "svc", NATSURL: "nats://127.0.0.1:4222", Replicas: 1, LogLevel: "info", AdminListen: daemon.DefaultAdminListen},
		},
		{
			name: "environment",
			env: map[string]string{
				"ATOLL_SVC_LISTEN": ":8080", "ATOLL_SVC_RATE": "2.5", "ATOLL_SVC_BURST": "7", "ATOLL_SVC_WAIT": "3m", "ATOLL_SVC_STRICT": "true",
				"ATOLL_NATS_URL": "nats://nats-0:4222,nats://nats-1:4222", "ATOLL_NATS_CREDS": "/creds/svc.nk", "ATOLL_NATS_REPLICAS": "3",
				"ATOLL_LOG_LEVEL": "warn", "ATOLL_ADMIN_LISTEN": ":9090", "ATOLL_CLUSTERS": "/etc/atoll/clusters.yaml", "ATOLL_INSECURE_DEV": "true",
			},
			want: settings{listen: ":8080", rate: 2.5, burst: 7, wait: 3 * time.Minute, strict: true},
			cfg:  daemon.Config{Service: "svc", NATSURL: "nats://nats-0:4222,nats://nats-1:4222", NATSCreds: "/creds/svc.nk", Replicas: 3, LogLevel: "warn", AdminListen: ":9090", ClustersFile: "/etc/atoll/clusters.yaml", InsecureDev: true},
		},
		{
			name: "flags win",
			args: []string{"-listen", ":1", "-rate=1", "-burst", "2", "-wait", "5s", "-strict", "-replicas", "5", "-nats", "nats://x:4222", "-admin-listen", "", "-insecure-dev=false"},
			env:  map[string]string{"ATOLL_SVC_LISTEN": ":8080", "ATOLL_SVC_BURST": "7", "ATOLL_NATS_REPLICAS": "3", "ATOLL_NATS_URL": "nats://y:4222", "ATOLL_SVC_STRICT": "false", "ATOLL_INSECURE_DEV": "true"},
			want: settings{listen: ":1", rate: 1, burst: 2, wait: 5 * time.Second, strict: true},
			cfg:  daemon.Config{Service: "svc", NATSURL: "nats://x:4222", Replicas: 5, LogLevel: "info", AdminListen: ""},
		},
		{
			name: "empty variable is unset",
			env:  map[string]string{"ATOLL_SVC_LISTEN": "", "ATOLL_SVC_BURST": ""},
			want: settings{listen: "127.0.0.1:8080", rate: 50, burst: 100, wait: time.Second},
			cfg:  daemon.Config{Service: "svc", NATSURL: "nats://127.0.0.1:4222", Replicas: 1, LogLevel: "info", AdminListen: daemon.DefaultAdminListen},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got settings
			cfg, err := daemon.Parse(command(&got), tt.args, envOf(tt.env), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("settings = %+v, want %+v", got, tt.want)
			}
			if cfg != tt.cfg {
				t.Errorf("config = %+v, want %+v", cfg, tt.cfg)
			}
		})
	}
}

// A variable that does not parse is refused, naming the variable and its
// flag, instead of silently becoming the default.
func TestParseBadEnvironment(t *testing.T) {
	for _, env := range []map[string]string{
		{"ATOLL_SVC_RATE": "fast"},
		{"ATOLL_SVC_BURST": "1.5"},
		{"ATOLL_SVC_WAIT": "10"},
		{"ATOLL_SVC_STRICT": "maybe"},
		{"ATOLL_NATS_REPLICAS": "three"},
	} {
		var s settings
		_, err := daemon.Parse(command(&s), nil, envOf(env), &bytes.Buffer{})
		for k := range env {
			if err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("%v: err = %v, want one naming %s", env, err, k)
			}
		}
	}
	var s settings
	if _, err := daemon.Parse(command(&s), []string{"-burst", "x"}, envOf(nil), &bytes.Buffer{}); err == nil {
		t.Error("-burst x parsed")
	}
	if _, err := daemon.Parse(command(&s), []string{"stray"}, envOf(nil), &bytes.Buffer{}); err == nil {
		t.Error("a stray argument parsed")
	}
}

// -h lists every flag with its variable, and the defaults compiled in,
// not those the environment set.
func TestHelpNamesEveryVariable(t *testing.T) {
	var s settings
	var out bytes.Buffer
	_, err := daemon.Parse(command(&s), []string{"-h"}, envOf(map[string]string{"ATOLL_SVC_BURST": "7"}), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	for _, v := range []string{"ATOLL_NATS_URL", "ATOLL_NATS_CREDS", "ATOLL_NATS_CA", "ATOLL_NATS_REPLICAS", "ATOLL_LOG_LEVEL", "ATOLL_ADMIN_LISTEN", "ATOLL_PROFILING", "ATOLL_CLUSTERS", "ATOLL_INSECURE_DEV",
		"ATOLL_SVC_LISTEN", "ATOLL_SVC_RATE", "ATOLL_SVC_BURST", "ATOLL_SVC_WAIT", "ATOLL_SVC_STRICT"} {
		if !strings.Contains(help, "("+v+")") {
			t.Errorf("-h does not name %s:\n%s", v, help)
		}
	}
	if !regexp.MustCompile(`(?s)-burst.*\(default 100\)`).MatchString(help) {
		t.Errorf("-h does not show burst's compiled default 100:\n%s", help)
	}
	// Every flag but -version (which has no setting) has its variable.
	flags := regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(help, -1)
	if len(flags) != 15 {
		t.Errorf("-h lists %d flags, want 15:\n%s", len(flags), help)
	}
}

// Validate refuses a configuration before anything starts.
func TestValidate(t *testing.T) {
	var s settings
	cmd := command(&s)
	cmd.Validate = func() error {
		if s.strict && s.burst < 10 {
			return errors.New("strict needs a burst of 10")
		}
		return nil
	}
	if _, err := daemon.Parse(cmd, []string{"-strict", "-burst", "3"}, envOf(nil), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "strict needs") {
		t.Errorf("err = %v, want the validation's", err)
	}
	if _, err := daemon.Parse(cmd, []string{"-strict"}, envOf(nil), &bytes.Buffer{}); err != nil {
		t.Errorf("valid configuration refused: %v", err)
	}
}

// At info, fx's steps are not logged: one line when started, and failures.
func TestFxLoggerQuiet(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	l := daemon.FxLogger(log, daemon.Config{Service: "svc", NATSURL: "nats://n:4222", AdminListen: ":9090"})
	for _, e := range []fxevent.Event{
		&fxevent.Provided{ConstructorName: "a"}, &fxevent.Invoking{FunctionName: "b"}, &fxevent.Invoked{FunctionName: "b"},
		&fxevent.OnStartExecuting{FunctionName: "c"}, &fxevent.OnStartExecuted{FunctionName: "c"}, &fxevent.LoggerInitialized{},
		&fxevent.Started{},
	} {
		l.LogEvent(e)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "msg=started") || !strings.Contains(lines[0], "service=svc") || !strings.Contains(lines[0], "nats=nats://n:4222") {
		t.Errorf("logged %q, want one started line", buf.String())
	}
	buf.Reset()
	l.LogEvent(&fxevent.OnStartExecuted{FunctionName: "c", Err: errors.New("boom")})
	if !strings.Contains(buf.String(), "boom") || !strings.Contains(buf.String(), "level=ERROR") {
		t.Errorf("a failed hook logged %q", buf.String())
	}

	buf.Reset()
	debug := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	daemon.FxLogger(debug, daemon.Config{Service: "svc"}).LogEvent(&fxevent.Provided{ConstructorName: "a", OutputTypeNames: []string{"T"}})
	if !strings.Contains(buf.String(), "provided") {
		t.Errorf("at debug, a provide logged %q", buf.String())
	}
}
