package tutorials

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"atoll.dev/libs/testenv"
)

// atollBuild is the `atoll` binary this test binary built, once.
var atollBuild struct {
	once sync.Once
	path string
	err  error
}

// buildAtoll builds ./cmd/atoll (services/atoll) once per test binary and
// returns its path.
func buildAtoll(t *testing.T) string {
	t.Helper()
	atollBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "tutorials-atoll-")
		if err != nil {
			atollBuild.err = err
			return
		}
		start := time.Now()
		atollBuild.path = filepath.Join(dir, "atoll")
		build := exec.Command("go", "build", "-o", atollBuild.path, "./cmd/atoll")
		build.Dir = "../.." // services/atoll
		if out, err := build.CombinedOutput(); err != nil {
			atollBuild.err = &buildError{err: err, out: string(out)}
			return
		}
		t.Logf("built atoll in %v", time.Since(start).Round(time.Millisecond))
	})
	if atollBuild.err != nil {
		t.Fatalf("go build ./cmd/atoll: %v", atollBuild.err)
	}
	return atollBuild.path
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// natsBinary is bin/nats (`make tools`), "" when it is not built.
func natsBinary() string {
	dir, err := testenv.FindBinDir()
	if err != nil {
		return ""
	}
	p := filepath.Join(dir, "nats")
	if st, err := os.Stat(p); err != nil || st.IsDir() {
		return ""
	}
	return p
}

// pathDir makes a directory holding (links to) atoll and, when given,
// nats: the session's PATH starts with it.
func pathDir(t *testing.T, atoll, nats string) string {
	t.Helper()
	dir := t.TempDir()
	for name, target := range map[string]string{"atoll": atoll, "nats": nats} {
		if target == "" {
			continue
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// sessionEnv is a session's whole environment: this process's, without
// the caller's ATOLL_* variables and home (so no config file of the user
// is read), with PATH starting at bin, HOME at home, and vars.
func sessionEnv(bin, home string, vars map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ATOLL_") || k == "HOME" || k == "XDG_CONFIG_HOME" || k == "PATH" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+home, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}
