package scheduler

import (
	"slices"
	"sync"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// term is what one tenure of the lease holds: its queues and the capacity
// it assumes taken. A new term starts from nothing but the buckets.
type term struct {
	work, replay *bus.Queue
	// later holds the placements older than the announce window whose
	// events a check found not yet ensured by this term: they are ensured
	// at Options.AnnounceRate, not all at once with the replay.
	later *bus.Queue
	// recentFrom is the first placement revision within the announce
	// window of the newest placement when the term started (rebuild).
	recentFrom uint64
	// decide serializes deciding and assuming, so that two workers never
	// place on the same free capacity, in queue order (decideLock).
	decide decideLock
	// grace is Options.AssumeGrace.
	grace time.Duration

	mu         sync.Mutex
	assumed    map[string]*assumedOn // mu must be held: by cluster
	onClusters map[string][]string   // mu must be held: clusters holding a key's assumptions
	published  map[string]uint64     // mu must be held: placement revision whose event is out, by key
	// preemptible indexes the placed Preemptible workloads, the only
	// possible victims of a preemption (mu must be held).
	preemptible map[string]*placed
	// pending holds the sort key of every workload whose last decision
	// was unschedulable, for its position in its tier queue (mu must be
	// held).
	pending map[string]string
	// queues holds the waiting sort keys per tier (the sort key's first
	// byte), sorted (mu must be held).
	queues map[string][]string
	// overlaid caches, per cluster, its inventory with the term's
	// assumptions added (mu must be held).
	overlaid map[string]overlaid
}

// overlaid is one cluster's inventory with assumptions, valid while the
// inventory is the same and its assumptions' version too.
type overlaid struct {
	base    *api.ClusterInfo
	version uint64
	c       *api.ClusterInfo
}

// placed is a placed Preemptible workload, as a victim sees it.
type placed struct {
	priority int32
	admitted time.Time
	per      api.Quantities
	shards   []api.Shard
}

// assumedOn is what a term assumes placed on one cluster.
type assumedOn struct {
	total, reserved api.PoolInfo          // summed over the shared and the Reserved pools' entries
	entries         map[string]assumption // by workload key
	// pruned is the inventory time the entries were last pruned against.
	pruned time.Time
	// version counts the changes of entries, for overlay's cache.
	version uint64
}

// assumption is one placement's share of one cluster (negative for the
// room a preemption released).
type assumption struct {
	decided time.Time
	req     api.Quantities
	pods    int64
	// reserved: on the cluster's Reserved pools (api.Shard.PoolTier).
	reserved bool
	// released is, for the room a preemption released, one victim pod's
	// requests: a node frees at least that much.
	released api.Quantities
}

// newTerm returns a term whose queues hand out keys in the order of
// sortKey (tier, then priority, then admission).
func newTerm(m *bus.Metrics, sortKey func(string) string) *term {
	return &term{
		work:    bus.NewQueue(bus.Instrumented(m, "work"), bus.Ordered(sortKey)),
		replay:  bus.NewQueue(bus.Instrumented(m, "replay"), bus.Ordered(sortKey)),
		later:   bus.NewQueue(bus.Instrumented(m, "announce-later")),
		assumed: map[string]*assumedOn{}, onClusters: map[string][]string{}, published: map[string]uint64{},
		preemptible: map[string]*placed{}, pending: map[string]string{}, queues: map[string][]string{}, overlaid: map[string]overlaid{},
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
	placedBefore := t.preemptible[key]
	undo = func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.forgetLocked(key)
		if placedBefore != nil {
			t.preemptible[key] = placedBefore
		}
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
	if tier, _ := w.Spec.Scheduling(); tier == api.TierPreemptible && len(d.Shards) > 0 {
		t.preemptible[key] = &placed{priority: api.PriorityOf(w), admitted: w.Metadata.Created, per: per, shards: d.Shards}
	}
	var on []string
	for _, sh := range d.Shards {
		n := int64(sh.Replicas)
		a := assumption{decided: d.Decided, pods: n, reserved: sh.PoolTier == api.PoolTierReserved, req: api.Quantities{
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
	t.unqueueLocked(key)
}

func (t *term) forgetLocked(key string) {
	for _, name := range t.onClusters[key] {
		if c := t.assumed[name]; c != nil {
			c.remove(key)
		}
	}
	delete(t.onClusters, key)
	delete(t.preemptible, key)
}

// overlay returns the clusters of base (read only) with what the term
// assumes on each counted as requested, in synthetic pools: the shared
// pools' assumptions in assumedPool, the Reserved pools' in
// assumedReservedPool. What an inventory newer than an assumption counts
// is dropped from the assumptions first. A cluster whose inventory and
// assumptions did not change since the last call is not copied again.
func (t *term) overlay(base []*api.ClusterInfo) []*api.ClusterInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*api.ClusterInfo, len(base))
	for i, c := range base {
		out[i] = c
		a := t.assumed[c.Name]
		if a == nil {
			continue
		}
		if c.Updated.After(a.pruned) {
			for key, e := range a.entries {
				grace := t.grace
				if e.pods < 0 {
					grace = 0 // released room: the next inventory says what it is
				}
				if e.decided.Add(grace).Before(c.Updated) {
					a.remove(key)
				}
			}
			a.pruned = c.Updated
		}
		if len(a.entries) == 0 {
			continue
		}
		if o, ok := t.overlaid[c.Name]; ok && o.base == c && o.version == a.version {
			out[i] = o.c
			continue
		}
		cp := *c
		cp.Pools = make(map[string]api.PoolInfo, len(c.Pools)+2)
		for k, v := range c.Pools {
			cp.Pools[k] = v
		}
		shared, reserved := a.total, a.reserved
		// Released room: a node of each victim's frees one of its pods at least.
		for _, e := range a.entries {
			p := &shared.MaxNodeFree
			if e.reserved {
				p = &reserved.MaxNodeFree
			}
			p.MilliCPU = max(p.MilliCPU, e.released.MilliCPU)
			p.MemoryBytes = max(p.MemoryBytes, e.released.MemoryBytes)
			p.GPUs = max(p.GPUs, e.released.GPUs)
		}
		cp.Pools[assumedPool] = shared
		if c.HasReservedPools() {
			reserved.Tier = api.PoolTierReserved
			cp.Pools[assumedReservedPool] = reserved
		}
		t.overlaid[c.Name] = overlaid{base: c, version: a.version, c: &cp}
		out[i] = &cp
	}
	return out
}

func (c *assumedOn) add(key string, a assumption) {
	c.remove(key)
	c.entries[key] = a
	c.version++
	p := &c.total
	if a.reserved {
		p = &c.reserved
	}
	p.Requested.MilliCPU += a.req.MilliCPU
	p.Requested.MemoryBytes += a.req.MemoryBytes
	p.Requested.GPUs += a.req.GPUs
	p.RequestedPods += a.pods
}

func (c *assumedOn) remove(key string) {
	a, ok := c.entries[key]
	if !ok {
		return
	}
	delete(c.entries, key)
	c.version++
	p := &c.total
	if a.reserved {
		p = &c.reserved
	}
	p.Requested.MilliCPU -= a.req.MilliCPU
	p.Requested.MemoryBytes -= a.req.MemoryBytes
	p.Requested.GPUs -= a.req.GPUs
	p.RequestedPods -= a.pods
}

// announcedAt is the placement revision of key whose event this term has
// seen out (0: none).
func (t *term) announcedAt(key string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.published[key]
}

// unannounce forgets that key's placement was announced: its events are
// ensured by the next reconcile's announce.
func (t *term) unannounce(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.published, key)
}

func (t *term) announced(key string, rev uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.published[key] = max(t.published[key], rev)
}

// release frees a preempted victim's pods and drops it from the victims:
// on a cluster whose inventory does not count them yet, by forgetting
// their assumption; on one whose inventory counts them, by counting them
// free until an inventory computed after now arrives.
func (t *term) release(victim string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.preemptible[victim]
	still := map[string]bool{} // clusters whose inventory does not count the victim yet
	for _, name := range t.onClusters[victim] {
		if c := t.assumed[name]; c != nil {
			_, still[name] = c.entries[victim]
		}
	}
	t.forgetLocked(victim)
	if p == nil {
		return
	}
	for _, sh := range p.shards {
		if still[sh.Cluster] {
			continue // forgetting the assumption freed it
		}
		n := int64(sh.Replicas)
		c := t.assumed[sh.Cluster]
		if c == nil {
			c = &assumedOn{entries: map[string]assumption{}}
			t.assumed[sh.Cluster] = c
		}
		c.add(releasePrefix+victim, assumption{decided: now, pods: -n, reserved: sh.PoolTier == api.PoolTierReserved, released: p.per, req: api.Quantities{
			MilliCPU: -p.per.MilliCPU * n, MemoryBytes: -p.per.MemoryBytes * n, GPUs: -p.per.GPUs * n,
		}})
	}
}

// releasePrefix marks the released room of a victim among a cluster's
// assumptions.
const releasePrefix = "(released) "

// victims returns, by cluster, the placed Preemptible workloads' shares
// in the pools a preemptor may use there: classOf says, per cluster,
// whether those are its Reserved pools and whether the cluster counts at
// all. These are the only candidates a preemption considers: Reserved and
// OnDemand work is never indexed here. One pass over the index.
func (t *term) victims(classOf func(cluster string) (reserved, ok bool)) map[string][]Victim {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string][]Victim{}
	for key, p := range t.preemptible {
		for _, sh := range p.shards {
			reserved, ok := classOf(sh.Cluster)
			if !ok || (sh.PoolTier == api.PoolTierReserved) != reserved {
				continue
			}
			n := int64(sh.Replicas)
			out[sh.Cluster] = append(out[sh.Cluster], Victim{Key: key, Priority: p.priority, Admitted: p.admitted, Pods: n,
				Req: api.Quantities{MilliCPU: p.per.MilliCPU * n, MemoryBytes: p.per.MemoryBytes * n, GPUs: p.per.GPUs * n}})
		}
	}
	return out
}

// queuePosition notes key as waiting (sortKey: its order) or as no
// longer waiting (sortKey ""), and returns its place among the waiting
// keys of its tier queue (1: next), or 0 when it does not wait. Each tier
// queue is a sorted slice of sort keys (which end with the workload key,
// so they are unique): a binary search, and a copy to insert or remove.
func (t *term) queuePosition(key, sortKey string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.pending[key]; ok && old != sortKey {
		t.unqueueLocked(key)
	}
	if sortKey == "" {
		return 0
	}
	q := t.queues[sortKey[:1]]
	i, found := slices.BinarySearch(q, sortKey)
	if !found {
		t.queues[sortKey[:1]] = slices.Insert(q, i, sortKey)
		t.pending[key] = sortKey
	}
	return i + 1
}

// unqueueLocked takes key out of its tier queue (t.mu must be held).
func (t *term) unqueueLocked(key string) {
	old, ok := t.pending[key]
	if !ok {
		return
	}
	q := t.queues[old[:1]]
	if i, found := slices.BinarySearch(q, old); found {
		t.queues[old[:1]] = slices.Delete(q, i, i+1)
	}
	delete(t.pending, key)
}

// pendingKeys lists the keys waiting in a tier queue.
func (t *term) pendingKeys() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.pending))
	for k := range t.pending {
		out = append(out, k)
	}
	return out
}
