package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// The sweep's owner check: a cluster is kept only while the pid in its name
// is a live process that started before the cluster was made.
func TestOwnerAlive(t *testing.T) {
	dir := t.TempDir()
	made := func(t *testing.T, age time.Duration) string {
		p := filepath.Join(t.TempDir(), "atoll-1-1-zone-a")
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// A live process, started now.
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })

	// A process that has exited and was reaped: its pid has no process.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}

	// A process that has exited and is not reaped yet: a zombie.
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = zombie.Wait() })
	waitZombie(t, zombie.Process.Pid)

	// A path made after the live process started (its time 5 s ahead).
	later := made(t, -5*time.Second)

	for _, tc := range []struct {
		name string
		pid  int
		path string
		want bool
	}{
		{"this process", os.Getpid(), dir, true},
		{"live owner, path made after it started", live.Process.Pid, later, true},
		{"pid reused: the process started after the path was made", live.Process.Pid, made(t, time.Hour), false},
		{"no process", gone.Process.Pid, later, false},
		{"zombie", zombie.Process.Pid, later, false},
		{"live, path gone: cannot compare, kept", live.Process.Pid, filepath.Join(dir, "missing"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ownerAlive(tc.pid, tc.path); got != tc.want {
				t.Errorf("ownerAlive(%d, %s) = %v, want %v", tc.pid, tc.path, got, tc.want)
			}
		})
	}
}

// waitZombie polls until pid is a zombie.
func waitZombie(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err == nil && isZombie(st) {
			return
		}
		time.Sleep(10 * time.Millisecond) // polling the process table
	}
	t.Fatalf("pid %d did not become a zombie", pid)
}
