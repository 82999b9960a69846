package scheduler

import (
	"sync"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// term is what one tenure of the lease holds: its queues and the capacity
// it assumes taken. A new term starts from nothing but the buckets.
type term struct {
	work, replay *bus.Queue
	// decide serializes deciding and assuming, so that two workers never
	// place on the same free capacity.
	decide sync.Mutex

	mu         sync.Mutex
	assumed    map[string]*assumedOn // mu must be held: by cluster
	onClusters map[string][]string   // mu must be held: clusters holding a key's assumptions
	published  map[string]uint64     // mu must be held: placement revision whose event is out, by key
}

// assumedOn is what a term assumes placed on one cluster.
type assumedOn struct {
	total   api.PoolInfo
	entries map[string]assumption // by workload key
	// pruned is the inventory time the entries were last pruned against.
	pruned time.Time
}

// assumption is one placement's share of one cluster.
type assumption struct {
	decided time.Time
	req     api.Quantities
	pods    int64
}

func newTerm(m *bus.Metrics) *term {
	return &term{
		work: bus.NewQueue(bus.Instrumented(m, "work")), replay: bus.NewQueue(bus.Instrumented(m, "replay")),
		assumed: map[string]*assumedOn{}, onClusters: map[string][]string{}, published: map[string]uint64{},
	}
}

// assume counts a decision's pods as requested on its clusters until an
// inventory computed after the decision reports them; it replaces what
// was assumed for the key before, and returns a function that restores
// that (for a decision that could not be written).
func (t *term) assume(key string, w *api.Workload, d *api.PlacementDecision) (undo func()) {
	per := w.Spec.PodTemplate().PodRequests()
	t.mu.Lock()
	defer t.mu.Unlock()
	before := map[string]assumption{}
	for _, name := range t.onClusters[key] {
		if a, ok := t.assumed[name].entries[key]; ok {
			before[name] = a
		}
	}
	undo = func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.forgetLocked(key)
		var on []string
		for name, a := range before {
			t.assumed[name].add(key, a)
			on = append(on, name)
		}
		if len(on) > 0 {
			t.onClusters[key] = on
		}
	}
	t.forgetLocked(key)
	var on []string
	for _, sh := range d.Shards {
		n := int64(sh.Replicas)
		a := assumption{decided: d.Decided, pods: n, req: api.Quantities{
			MilliCPU: per.MilliCPU * n, MemoryBytes: per.MemoryBytes * n, GPUs: per.GPUs * n,
		}}
		c := t.assumed[sh.Cluster]
		if c == nil {
			c = &assumedOn{entries: map[string]assumption{}}
			t.assumed[sh.Cluster] = c
		}
		c.add(key, a)
		on = append(on, sh.Cluster)
	}
	if len(on) > 0 {
		t.onClusters[key] = on
	}
	return undo
}

// forget drops what was assumed for a deleted workload.
func (t *term) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgetLocked(key)
	delete(t.published, key)
}

func (t *term) forgetLocked(key string) {
	for _, name := range t.onClusters[key] {
		if c := t.assumed[name]; c != nil {
			c.remove(key)
		}
	}
	delete(t.onClusters, key)
}

// assumedOn returns what is assumed on cluster c beyond its inventory,
// dropping what the inventory now counts; ok is false when nothing is.
func (t *term) assumedOn(c *api.ClusterInfo) (api.PoolInfo, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.assumed[c.Name]
	if a == nil {
		return api.PoolInfo{}, false
	}
	if c.Updated.After(a.pruned) {
		for key, e := range a.entries {
			if e.decided.Before(c.Updated) {
				a.remove(key)
			}
		}
		a.pruned = c.Updated
	}
	return a.total, len(a.entries) > 0
}

func (c *assumedOn) add(key string, a assumption) {
	c.remove(key)
	c.entries[key] = a
	c.total.Requested.MilliCPU += a.req.MilliCPU
	c.total.Requested.MemoryBytes += a.req.MemoryBytes
	c.total.Requested.GPUs += a.req.GPUs
	c.total.RequestedPods += a.pods
}

func (c *assumedOn) remove(key string) {
	a, ok := c.entries[key]
	if !ok {
		return
	}
	delete(c.entries, key)
	c.total.Requested.MilliCPU -= a.req.MilliCPU
	c.total.Requested.MemoryBytes -= a.req.MemoryBytes
	c.total.Requested.GPUs -= a.req.GPUs
	c.total.RequestedPods -= a.pods
}

// announcedAt is the placement revision of key whose event this term has
// seen out (0: none).
func (t *term) announcedAt(key string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.published[key]
}

func (t *term) announced(key string, rev uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.published[key] = max(t.published[key], rev)
}
