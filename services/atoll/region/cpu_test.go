package region

import (
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// TestThreadsCPUCountsEveryThread burns CPU on several threads at once:
// the sum over threads must account for about what the kernel's tick
// count of the whole process does, where the process's own schedstat
// (its first thread only) sees at most the share of one of them.
func TestThreadsCPUCountsEveryThread(t *testing.T) {
	self, err := procfs.Self()
	if err != nil {
		t.Skipf("no procfs: %v", err)
	}
	ticks := func() time.Duration {
		st, err := self.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(st.CPUTime() * float64(time.Second))
	}
	threads := func() time.Duration {
		d, err := threadsCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	t0, s0 := ticks(), threads()
	var wg sync.WaitGroup
	burners := 2 * runtime.GOMAXPROCS(0)
	for range burners {
		wg.Go(func() {
			runtime.LockOSThread() // each burner on a thread of its own
			defer runtime.UnlockOSThread()
			for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); { //nolint:revive // empty-block: the loop burns CPU, which is the point
			}
		})
	}
	wg.Wait()
	byTicks, byThreads := ticks()-t0, threads()-s0
	t.Logf("%d threads burning: %v by the process's ticks, %v by the sum over its threads", burners, byTicks, byThreads)
	if byTicks < 300*time.Millisecond {
		t.Skipf("the burners got too little CPU to compare (%v)", byTicks)
	}
	if byThreads < byTicks*8/10 {
		t.Errorf("the sum over threads counted %v of the %v the process used", byThreads, byTicks)
	}
	// The tick count read first: it only grows, so no margin is needed.
	floor := ticks()
	if cpu, err := ProcessCPU(os.Getpid()); err != nil || cpu < floor {
		t.Errorf("ProcessCPU = %v, %v; want at least the tick count %v", cpu, err, floor)
	}
}
