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

// workloadCache keeps each workload decoded as of its revision in the
// mirror, so that a document is decoded once per change however many
// times it is read (the replay's check, the reconcile, a term's rebuild,
// a preemption). The decoded workloads are shared and read only.
type workloadCache struct {
	mu    sync.Mutex
	byKey map[string]decodedWorkload // mu must be held
}

type decodedWorkload struct {
	rev uint64
	w   *api.Workload
	err error
}

// workload returns the workload of key, decoded, from the mirror: ok is
// false when there is none, err non-nil when its document does not
// decode.
func (s *Service) workload(key string) (w *api.Workload, ok bool, err error) {
	e, ok := s.workloadM.Get(key)
	if !ok {
		return nil, false, nil
	}
	s.decoded.mu.Lock()
	c, hit := s.decoded.byKey[key]
	s.decoded.mu.Unlock()
	if hit && c.rev == e.Revision {
		return c.w, true, c.err
	}
	w, err = api.Decode(e.Value)
	s.decoded.mu.Lock()
	defer s.decoded.mu.Unlock()
	if s.decoded.byKey == nil {
		s.decoded.byKey = map[string]decodedWorkload{}
	}
	if c, hit := s.decoded.byKey[key]; !hit || c.rev < e.Revision {
		s.decoded.byKey[key] = decodedWorkload{rev: e.Revision, w: w, err: err}
	}
	return w, true, err
}

// forgetWorkload drops what was decoded of key.
func (s *Service) forgetWorkload(key string) {
	s.decoded.mu.Lock()
	defer s.decoded.mu.Unlock()
	delete(s.decoded.byKey, key)
}
