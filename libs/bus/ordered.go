package bus

import (
	"container/heap"

	"k8s.io/client-go/util/workqueue"
)

// Ordered makes a queue hand out waiting keys in increasing order of
// sortKey(key) instead of first in, first out; keys of equal sort key go
// in the order they were queued. sortKey is called once when a key is
// queued and again when it is queued anew while it waits (its order may
// have changed), always under the queue's lock: it must be quick and must
// not call the queue. Deduplication, delays and retries are unchanged.
// The scheduler orders its work by tier and priority this way.
func Ordered(sortKey func(key string) string) QueueOption {
	return func(q *Queue) {
		q.q.ShutDown() // the FIFO queue NewQueue made; nothing is in it yet
		index := map[string]int{}
		h := &orderedKeys{sortKey: sortKey, index: index, h: keyHeap{index: index}}
		q.q = workqueue.NewTypedRateLimitingQueueWithConfig(q.retry, workqueue.TypedRateLimitingQueueConfig[string]{
			DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
				Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Queue: h}),
			}),
		})
	}
}

// orderedKeys is a heap of keys by sort key, then by when queued; it
// implements workqueue.Queue.
type orderedKeys struct {
	sortKey func(string) string
	h       keyHeap
	index   map[string]int // position of each key in h.items
	seq     uint64
}

var _ workqueue.Queue[string] = (*orderedKeys)(nil)

func (o *orderedKeys) Touch(key string) {
	if i, ok := o.index[key]; ok {
		o.h.items[i].sort = o.sortKey(key)
		heap.Fix(&o.h, i)
	}
}

func (o *orderedKeys) Push(key string) {
	if _, ok := o.index[key]; ok {
		o.Touch(key)
		return
	}
	o.seq++
	heap.Push(&o.h, orderedKey{key: key, sort: o.sortKey(key), seq: o.seq})
}

func (o *orderedKeys) Pop() string {
	if o.h.Len() == 0 {
		return ""
	}
	return heap.Pop(&o.h).(orderedKey).key
}

func (o *orderedKeys) Len() int { return o.h.Len() }

type orderedKey struct {
	key, sort string
	seq       uint64
}

// keyHeap is the container/heap side of orderedKeys.
type keyHeap struct {
	items []orderedKey
	index map[string]int
}

func (h *keyHeap) Len() int { return len(h.items) }

func (h *keyHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.sort != b.sort {
		return a.sort < b.sort
	}
	return a.seq < b.seq
}

func (h *keyHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.index[h.items[i].key] = i
	h.index[h.items[j].key] = j
}

func (h *keyHeap) Push(x any) {
	k := x.(orderedKey)
	h.index[k.key] = len(h.items)
	h.items = append(h.items, k)
}

func (h *keyHeap) Pop() any {
	last := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	delete(h.index, last.key)
	return last
}
