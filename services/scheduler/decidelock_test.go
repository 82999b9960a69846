package scheduler

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDecideLockHandsOverInOrder(t *testing.T) {
	var l decideLock
	l.Lock("0")
	var (
		mu  sync.Mutex
		got []string
		wg  sync.WaitGroup
	)
	for _, k := range []string{"2b", "1", "2a", "0x"} {
		wg.Go(func() {
			l.Lock(k)
			mu.Lock()
			got = append(got, k)
			mu.Unlock()
			l.Unlock()
		})
	}
	// Wait until all four wait: their arrival order is the subject's noise.
	for deadline := time.Now().Add(5 * time.Second); ; {
		l.mu.Lock()
		n := l.waiters.Len()
		l.mu.Unlock()
		if n == 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond) // polling the waiters
	}
	l.Unlock()
	wg.Wait()
	if diff := cmp.Diff([]string{"0x", "1", "2a", "2b"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}
