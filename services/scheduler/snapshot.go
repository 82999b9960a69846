package scheduler

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"atoll.dev/libs/api"
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
