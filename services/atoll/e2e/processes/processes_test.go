// Package processes tests a region whose services run as processes of
// their own binaries (region.Options.Exec), the commands production runs,
// configured as a container is (environment variables, their own NATS
// users' credentials, a tokens file): the scale benchmark measures such a
// region. The tests need member clusters (libs/testenv) and the go
// command, and skip under -short.
package processes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/sdk"
	"atoll.dev/services/atoll/region"
)

func appDoc(name string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":%q},
"spec":{"replicas":2,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`, name))
}

// waitRunning waits until the App is Running with all its replicas ready.
func waitRunning(t *testing.T, c *sdk.Client, project, name string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		w, err := c.Get(context.Background(), project, "App", name)
		if !assert.NoError(ct, err) {
			return
		}
		assert.Equal(ct, "Running", string(w.Status.Phase))
		assert.Equal(ct, int32(2), w.Status.Ready, "ready pods")
	}, 2*time.Minute, 250*time.Millisecond, "App %s Running 2/2", name)
}

// execMark is added to every process's environment (Options.ExecEnv).
const execMark = "ATOLL_PROCESSES_TEST=1"

func TestRegionOfProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("needs member clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	exe := t.TempDir()
	start := time.Now()
	require.NoError(t, region.BuildServices(ctx, exe))
	t.Logf("services built in %v", time.Since(start).Round(time.Millisecond))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir := t.TempDir()
	reg, err := region.Start(ctx, region.Options{Dir: dir, Zones: []string{"a"}, Nodes: 3, Exec: exe, Logger: log,
		ExecEnv: []string{execMark}})
	require.NoError(t, err)
	stopped := false
	defer func() {
		if !stopped {
			_ = reg.Stop(context.Background())
		}
	}()

	// Every service runs as its own process, none of them this one.
	usage, err := reg.Usage(ctx)
	require.NoError(t, err)
	var names []string
	pids := map[int]string{}
	for _, u := range usage {
		names = append(names, u.Replica.Service)
		assert.NotEqual(t, os.Getpid(), u.PID, u.Replica.String())
		assert.Positive(t, u.CPU, "%s used no CPU", u.Replica)
		assert.Positive(t, u.HeapBytes, "%s has no heap", u.Replica)
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", u.PID))
		if assert.NoError(t, err) {
			// Not printed whole on failure: an environment can hold secrets.
			assert.True(t, slices.Contains(strings.Split(string(environ), "\x00"), execMark), "%s's environment lacks Options.ExecEnv's %s", u.Replica, execMark)
		}
		pids[u.PID] = u.Replica.String()
	}
	var want []string
	for _, s := range region.Services {
		want = append(want, s.Name)
	}
	slices.Sort(names)
	slices.Sort(want)
	require.Equal(t, want, names, "one process per service")
	require.Len(t, pids, len(want), "distinct processes")

	// The gateway process authenticates the region's admin token (its
	// tokens file) and the App runs in the member cluster.
	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.AdminToken), sdk.WithTimeout(10*time.Second))
	require.NoError(t, err)
	const project = "procs"
	_, err = c.CreateWorkloadJSON(ctx, project, appDoc("first"), sdk.NewIdempotencyKey())
	require.NoError(t, err)
	waitRunning(t, c, project, "first")

	// SIGKILL the scheduler's and the propagator's processes: the next App
	// waits for them, and runs once they are started again.
	for _, s := range []string{"scheduler", "propagator"} {
		require.NoError(t, reg.Kill(s, 0))
		assert.False(t, reg.Running(s, 0))
	}
	_, err = c.CreateWorkloadJSON(ctx, project, appDoc("second"), sdk.NewIdempotencyKey())
	require.NoError(t, err, "admission and quota still run")
	for _, s := range []string{"scheduler", "propagator"} {
		require.NoError(t, reg.StartReplica(ctx, s, 0))
	}
	waitRunning(t, c, project, "second")

	// Stop ends every process.
	usage, err = reg.Usage(ctx)
	require.NoError(t, err)
	require.NoError(t, reg.Stop(ctx))
	stopped = true
	for _, u := range usage {
		err := syscall.Kill(u.PID, 0)
		assert.True(t, errors.Is(err, syscall.ESRCH), "%s (pid %d) still exists after Stop: %v", u.Replica, u.PID, err)
	}
}
