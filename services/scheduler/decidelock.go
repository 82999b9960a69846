package scheduler

import (
	"container/heap"
	"sync"
)

// decideLock serializes decisions like a mutex, but hands the lock to
// the waiter first in queue order (the lowest sort key: Reserved, then
// OnDemand, then Preemptible, by priority and admission), not to
// whichever goroutine wins the race. Workers take keys from the ordered
// queue in parallel and reach the decision at slightly different times;
// with this lock a Reserved workload that arrives among a burst of
// Preemptible ones is decided before every one that waits with it.
type decideLock struct {
	mu      sync.Mutex
	held    bool        // mu must be held
	waiters lockWaiters // mu must be held
	seq     uint64      // mu must be held
}

// Lock takes the lock for a decision on the workload of sortKey.
func (l *decideLock) Lock(sortKey string) {
	l.mu.Lock()
	if !l.held {
		l.held = true
		l.mu.Unlock()
		return
	}
	l.seq++
	w := &lockWaiter{sort: sortKey, seq: l.seq, ready: make(chan struct{})}
	heap.Push(&l.waiters, w)
	l.mu.Unlock()
	<-w.ready // the lock was handed over: held stays true
}

// Unlock hands the lock to the first waiter in order, or frees it.
func (l *decideLock) Unlock() {
	l.mu.Lock()
	if l.waiters.Len() == 0 {
		l.held = false
		l.mu.Unlock()
		return
	}
	w := heap.Pop(&l.waiters).(*lockWaiter)
	l.mu.Unlock()
	close(w.ready)
}

type lockWaiter struct {
	sort  string
	seq   uint64
	ready chan struct{}
}

// lockWaiters is a heap by sort key, then arrival.
type lockWaiters []*lockWaiter

func (h lockWaiters) Len() int { return len(h) }
func (h lockWaiters) Less(i, j int) bool {
	if h[i].sort != h[j].sort {
		return h[i].sort < h[j].sort
	}
	return h[i].seq < h[j].seq
}
func (h lockWaiters) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *lockWaiters) Push(x any)   { *h = append(*h, x.(*lockWaiter)) }
func (h *lockWaiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}
