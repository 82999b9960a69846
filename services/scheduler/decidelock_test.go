package scheduler

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// lockOrder records the order in which tickets, each locked in its own
// goroutine, decide.
type lockOrder struct {
	mu  sync.Mutex
	got []string
	wg  sync.WaitGroup
}

func (o *lockOrder) lock(c *ticket, key string) {
	o.wg.Go(func() {
		c.Lock()
		o.mu.Lock()
		o.got = append(o.got, key)
		o.mu.Unlock()
		c.l.Unlock()
	})
}

// waitWaiters waits until l has n waiters: their arrival order is the
// subject's noise.
func waitWaiters(t *testing.T, l *decideLock, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		l.mu.Lock()
		got := l.waiters.Len()
		l.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", got, n)
		}
		time.Sleep(time.Millisecond) // polling the waiters
	}
}

func TestDecideLockHandsOverInOrder(t *testing.T) {
	var l decideLock
	l.Take("0").Lock()
	var o lockOrder
	for _, k := range []string{"2b", "1", "2a", "0x"} {
		o.lock(l.Take(k), k)
	}
	waitWaiters(t, &l, 4)
	l.Unlock()
	o.wg.Wait()
	if diff := cmp.Diff([]string{"0x", "1", "2a", "2b"}, o.got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

// TestDecideLockWaitsForABetterTicket: a better-ranked key taken but not
// yet at its decision goes before worse ones already waiting, as long as
// it comes within the wait; one that leaves, or is late, holds no one.
func TestDecideLockWaitsForABetterTicket(t *testing.T) {
	for _, tc := range []struct {
		name string
		// then is what the better ticket does after the worse ones wait.
		then func(l *decideLock, better *ticket, o *lockOrder)
		want []string
	}{
		{"comes", func(_ *decideLock, better *ticket, o *lockOrder) { o.lock(better, "0") }, []string{"0", "1", "2"}},
		{"leaves", func(_ *decideLock, better *ticket, _ *lockOrder) { better.Leave() }, []string{"1", "2"}},
		{"late", func(l *decideLock, better *ticket, o *lockOrder) {
			time.Sleep(3 * l.comingWait)
			o.lock(better, "0")
		}, []string{"1", "2", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wait := time.Second
			if tc.name == "late" {
				wait = 50 * time.Millisecond
			}
			l := decideLock{comingWait: wait}
			better := l.Take("0")
			var o lockOrder
			o.lock(l.Take("2"), "2")
			o.lock(l.Take("1"), "1")
			waitWaiters(t, &l, 2)
			time.Sleep(10 * time.Millisecond)
			o.mu.Lock()
			early := len(o.got)
			o.mu.Unlock()
			if tc.name != "late" && early != 0 {
				t.Fatalf("%d decided while a better key was coming", early)
			}
			start := time.Now()
			tc.then(&l, better, &o)
			o.wg.Wait()
			if diff := cmp.Diff(tc.want, o.got); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
			if tc.name != "late" && time.Since(start) > wait/2 {
				t.Errorf("decided %v after the better key came or left, want at once", time.Since(start))
			}
		})
	}
}
