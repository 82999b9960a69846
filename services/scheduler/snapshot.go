package scheduler

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"atoll.dev/libs/api"
	lru "github.com/hashicorp/golang-lru/v2"
)

// inventoryCache keeps the decoded inventory, sorted by cluster name,
// between changes of the clusters bucket, so that a decision does not
// list, sort and look up every cluster again: a snapshot costs a pass
// over cached pointers (and the term's overlay of its assumptions).
type inventoryCache struct {
	// version counts the clusters mirror's changes.
	version atomic.Uint64

	mu    sync.Mutex
	built uint64             // mu must be held: the version list was built at
	at    time.Time          // mu must be held: when
	list  []*api.ClusterInfo // mu must be held: read only once built
}

// inventoryRefresh bounds how long a list is reused without a change
// seen (a mirror that re-watched after an outage drops deleted keys
// without a change notice).
const inventoryRefresh = time.Second

// inventoryChanged is the clusters mirror's change hook.
func (s *Service) inventoryChanged(name string) {
	s.inv.version.Add(1)
	s.clusterQ.Add(name)
}

// inventoryList returns the known clusters sorted by name, decoded; the
// list and its clusters are shared and read only.
func (s *Service) inventoryList() []*api.ClusterInfo {
	v := s.inv.version.Load()
	s.inv.mu.Lock()
	defer s.inv.mu.Unlock()
	if s.inv.list != nil && s.inv.built == v && time.Since(s.inv.at) < inventoryRefresh {
		return s.inv.list
	}
	names := s.clusterM.Keys()
	slices.Sort(names)
	out := make([]*api.ClusterInfo, 0, len(names))
	for _, name := range names {
		if c := s.cluster(name); c != nil {
			out = append(out, c)
		}
	}
	s.inv.list, s.inv.built, s.inv.at = out, v, time.Now()
	return out
}

// workloadCache keeps the most recently read workloads decoded as of
// their revision in the mirror, so that a document read by several
// phases of one decision (the replay's check, the reconcile, a term's
// rebuild, a preemption) is decoded once per change. It is bounded
// (decodedKeep): holding every workload decoded cost the scheduler 2.3 KB
// of heap the collector scans per workload, and at 100,000 workloads the
// runtime's forced collections (one every two minutes) spent a quarter
// of a second a minute marking them with nothing submitted (profile of
// the idle region); a key that fell out is decoded again when next read
// (about 25 µs for a two-container App). The decoded workloads are
// shared and read only.
type workloadCache = lru.Cache[string, decodedWorkload]

// decodedKeep is how many decoded workloads the scheduler keeps: many
// more than a burst of submissions has in flight at once.
const decodedKeep = 4096

type decodedWorkload struct {
	rev uint64
	w   *api.Workload
	err error
}

// newWorkloadCache returns an empty cache of decodedKeep workloads.
func newWorkloadCache() *workloadCache {
	c, err := lru.New[string, decodedWorkload](decodedKeep)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return c
}

// workload returns the workload of key, decoded, from the mirror: ok is
// false when there is none, err non-nil when its document does not
// decode.
func (s *Service) workload(key string) (w *api.Workload, ok bool, err error) {
	e, ok := s.workloadM.Get(key)
	if !ok {
		return nil, false, nil
	}
	if c, hit := s.decoded.Get(key); hit && c.rev == e.Revision {
		return c.w, true, c.err
	}
	w, err = api.Decode(e.Value)
	// A concurrent read of a newer revision may land first; this one then
	// replaces it, and the next read, seeing the revisions differ, decodes
	// again.
	s.decoded.Add(key, decodedWorkload{rev: e.Revision, w: w, err: err})
	return w, true, err
}

// forgetWorkload drops what was decoded of key.
func (s *Service) forgetWorkload(key string) {
	s.decoded.Remove(key)
}
