package scheduler

import (
	"container/heap"
	"sync"
	"time"
)

// ComingWait bounds how long decisions wait for a better-ranked workload
// that a worker has taken but that has not reached its decision yet
// (decideLock).
const ComingWait = 20 * time.Millisecond

// decideLock serializes decisions like a mutex, but in queue order (the
// lowest sort key: Reserved, then OnDemand, then Preemptible, by priority
// and admission), not in the order workers reach it. Workers take keys
// from the ordered queue in parallel and read each workload before its
// decision; on a busy machine the best ranked of a burst, taken first,
// may finish its read after a dozen worse ones taken after it. So a
// worker announces its key when it takes it (Take): the lock goes to the
// best waiter only when no better-ranked key taken less than comingWait
// ago is still on its way to the lock (one that needs no decision leaves
// at once), and a Reserved workload in a Preemptible burst is decided
// first.
type decideLock struct {
	mu         sync.Mutex
	held       bool             // mu must be held
	waiters    lockWaiters      // mu must be held
	coming     map[*ticket]bool // mu must be held: taken, not yet waiting
	seq        uint64           // mu must be held
	timer      *time.Timer      // mu must be held: the next dispatch, after a wait for a coming ticket
	comingWait time.Duration    // ComingWait when 0 (tests set it)
}

// ticket is one workload's place at the decide lock, from when a worker
// takes it until it decides (Lock) or gives up before a decision (Leave).
type ticket struct {
	l     *decideLock
	sort  string
	since time.Time
	seq   uint64
	ready chan struct{}
}

// Take announces a workload of sortKey on its way to a decision.
func (l *decideLock) Take(sortKey string) *ticket {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.coming == nil {
		l.coming = map[*ticket]bool{}
	}
	c := &ticket{l: l, sort: sortKey, since: time.Now()}
	l.coming[c] = true
	return c
}

// Lock waits for c's turn and takes the lock.
func (c *ticket) Lock() {
	l := c.l
	l.mu.Lock()
	delete(l.coming, c)
	l.seq++
	c.seq, c.ready = l.seq, make(chan struct{})
	heap.Push(&l.waiters, c)
	if !l.held {
		l.dispatch()
	}
	l.mu.Unlock()
	<-c.ready // handed over: held stays true
}

// Leave withdraws c when its workload needs no decision; it does nothing
// once c has locked.
func (c *ticket) Leave() {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.coming[c] {
		return
	}
	delete(l.coming, c)
	if !l.held {
		l.dispatch()
	}
}

// Unlock hands the lock to the next waiter in order, or frees it.
func (l *decideLock) Unlock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = false
	l.dispatch()
}

// dispatch hands the free lock to the best waiter unless a better-ranked
// ticket taken less than comingWait ago is still coming; then it tries
// again when that wait ends (or when the ticket locks or leaves). l.mu
// must be held and the lock free.
func (l *decideLock) dispatch() {
	if l.waiters.Len() == 0 {
		return
	}
	best := l.waiters[0]
	now := time.Now()
	wait := l.comingWait
	if wait == 0 {
		wait = ComingWait
	}
	var until time.Time
	for c := range l.coming {
		if c.sort < best.sort && now.Sub(c.since) < wait {
			if end := c.since.Add(wait); end.After(until) {
				until = end
			}
		}
	}
	if !until.IsZero() {
		if l.timer == nil {
			l.timer = time.AfterFunc(until.Sub(now), func() {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.timer = nil
				if !l.held {
					l.dispatch()
				}
			})
		}
		return
	}
	heap.Pop(&l.waiters)
	l.held = true
	close(best.ready)
}

// lockWaiters is a heap by sort key, then arrival.
type lockWaiters []*ticket

func (h lockWaiters) Len() int { return len(h) }
func (h lockWaiters) Less(i, j int) bool {
	if h[i].sort != h[j].sort {
		return h[i].sort < h[j].sort
	}
	return h[i].seq < h[j].seq
}
func (h lockWaiters) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *lockWaiters) Push(x any)   { *h = append(*h, x.(*ticket)) }
func (h *lockWaiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}
