package testenv_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"atoll.dev/libs/testenv"
)

// TestHelperOwner is not a test: run as a child process by the tests below,
// it starts one cluster, prints its directory and waits to be signalled.
func TestHelperOwner(t *testing.T) {
	if os.Getenv("ATOLL_TESTENV_HELPER") != "1" {
		t.Skip("helper process")
	}
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{}, testenv.ClusterSpec{Zone: "x"})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	fmt.Println("DIR", env.Clusters[0].Dir())
	time.Sleep(5 * time.Minute) // the subject: the owner waits to be signalled; 5 minutes only bound a leaked helper
}

func startOwner(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperOwner$", "-test.v")
	cmd.Env = append(os.Environ(), "ATOLL_TESTENV_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	var acc string
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		n, err := out.Read(buf)
		acc += string(buf[:n])
		for _, line := range strings.Split(acc, "\n") {
			if dir, ok := strings.CutPrefix(line, "DIR "); ok {
				go func() { _, _ = out.Read(make([]byte, 1<<20)) }()
				return cmd, strings.TrimSpace(dir)
			}
		}
		if err != nil {
			break
		}
	}
	_ = cmd.Process.Kill()
	t.Fatalf("helper did not start a cluster: %s", acc)
	return nil, ""
}

// TestInterruptTearsDown sends SIGINT to a process that owns a cluster:
// it must delete the cluster before it exits.
func TestInterruptTearsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("member clusters")
	}
	cmd, dir := startOwner(t)
	if n := len(testenv.Processes(dir)); n < 5 {
		t.Fatalf("owner runs %d cluster processes, want at least 5", n)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if left := testenv.Processes(dir); len(left) > 0 {
		t.Errorf("processes left after SIGINT: %v", left)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("cluster directory %s left after SIGINT", dir)
	}
}

// TestKilledOwnerIsSwept kills a cluster's owner with SIGKILL (no cleanup
// possible): the next environment started removes the orphan.
func TestKilledOwnerIsSwept(t *testing.T) {
	if testing.Short() {
		t.Skip("member clusters")
	}
	cmd, dir := startOwner(t)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(testenv.Processes(dir)) == 0 {
		t.Fatal("expected orphaned processes after SIGKILL")
	}
	n, err := testenv.SweepStale(context.Background(), testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 {
		t.Errorf("swept %d clusters, want at least 1", n)
	}
	if left := testenv.Processes(dir); len(left) > 0 {
		t.Errorf("processes left after sweep: %v", left)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("directory %s left after sweep", dir)
	}
}

// rssMiB sums the resident memory of pids.
func rssMiB(pids []int) int {
	total := 0
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				total += kb
			}
		}
	}
	return total / 1024
}
