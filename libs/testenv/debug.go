package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DebugSim makes KWOK answer `kubectl logs` and `kubectl exec` for every
// Pod of every namespace of the member clusters, as a kubelet would: the
// log of every container is LogsFile, and exec runs the command on this
// machine (a simulation for tests and `atoll-dev`, never for clusters that
// run other people's commands).
//
// As a kubelet gives a running container its environment and its mounted
// ConfigMap and Secret files, the environment runs a pod simulation that
// writes, for each running Pod, a KWOK Exec named after it: exec in one of
// its containers runs in ExecWorkDir/pods/<cluster>/<namespace>/<pod>/<container>,
// with the container's env and envFrom variables (resolved from the
// ConfigMaps and Secrets of its namespace) added to the environment, and
// with each ConfigMap and Secret volume's keys written as files (their
// items' paths, their modes) at their mount path below that directory: a
// file a container has at /etc/conf/key is `./etc/conf/key`, or
// "$PWD/etc/conf/key", where exec runs. Files and variables are written
// once, when the Pod is first seen running with every ConfigMap and Secret
// it names (a later change of them reaches the pods started after it). A
// Pod without its own Exec yet runs exec in ExecWorkDir itself.
type DebugSim struct {
	// LogsFile is a container log in CRI format (see AppendLog), served as
	// the log of every container. It is followed: lines appended later
	// reach `logs --follow` streams. It is created empty when missing.
	LogsFile string
	// ExecWorkDir is the directory exec commands run in (those of a
	// simulated Pod in a directory of their own below it); created when
	// missing.
	ExecWorkDir string
}

// debugConfig is the kwokctl configuration of a DebugSim: a ClusterLogs and
// a ClusterExec without selector, which match every Pod and container (a
// Pod's own Exec, written by the pod simulation, wins over the ClusterExec).
func (d *DebugSim) config() string {
	return fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: atoll-logs
spec:
  logs:
  - logsFile: %s
    follow: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata:
  name: atoll-exec
spec:
  execs:
  - local:
      workDir: %s
`, strconv.Quote(d.LogsFile), strconv.Quote(d.ExecWorkDir))
}

// debugFile writes the environment's DebugSim configuration and returns
// its path, or "" when the option is not set.
func (e *Env) writeDebugFile() (string, error) {
	d := e.opts.Debug
	if d == nil {
		return "", nil
	}
	if d.LogsFile == "" || d.ExecWorkDir == "" {
		return "", fmt.Errorf("debug simulation needs a LogsFile and an ExecWorkDir")
	}
	abs := *d
	var err error
	if abs.LogsFile, err = filepath.Abs(d.LogsFile); err != nil {
		return "", err
	}
	if abs.ExecWorkDir, err = filepath.Abs(d.ExecWorkDir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(abs.LogsFile), 0o755); err != nil {
		return "", fmt.Errorf("debug simulation: %w", err)
	}
	f, err := os.OpenFile(abs.LogsFile, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return "", fmt.Errorf("debug simulation: %w", err)
	}
	f.Close()
	if err := os.MkdirAll(abs.ExecWorkDir, 0o755); err != nil {
		return "", fmt.Errorf("debug simulation: %w", err)
	}
	e.execWorkDir = abs.ExecWorkDir
	if err := os.MkdirAll(e.opts.WorkDir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(e.opts.WorkDir, e.id+".debug.yaml")
	if err := os.WriteFile(p, []byte(abs.config()), 0o644); err != nil {
		return "", fmt.Errorf("debug simulation: %w", err)
	}
	return p, nil
}

// AppendLog appends lines to a CRI-format container log, as a container
// runtime writes them: "<RFC3339Nano time> stdout F <line>", each with the
// time it is written. A line holding a newline is written as several.
func AppendLog(path string, lines ...string) error {
	var b strings.Builder
	for _, l := range lines {
		for _, one := range strings.Split(l, "\n") {
			b.WriteString(time.Now().UTC().Format(time.RFC3339Nano))
			b.WriteString(" stdout F ")
			b.WriteString(one)
			b.WriteByte('\n')
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("append log: %w", err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fmt.Errorf("append log %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("append log %s: %w", path, err)
	}
	return nil
}
