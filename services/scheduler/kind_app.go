package scheduler

import (
	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// The App: its replicas spread evenly across zones, then across each
// zone's clusters, the overflow moved to clusters with room. It runs until
// it is deleted: a placement of an App never counts as finished.
type appKind struct{ defaults }

func (appKind) divide(w *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard {
	return divideReplicas(w, fw, cands)
}

// finishes is false: an App runs until it is deleted.
func (appKind) finishes() bool { return false }

// split divides n into len(weights) parts proportional to weights, handing
// the remainder out one each in order (so it is spread, not piled).
func split(n int64, weights []int64) []int64 {
	out := make([]int64, len(weights))
	var total int64
	for _, w := range weights {
		total += w
	}
	if total == 0 || n <= 0 {
		return out
	}
	var given int64
	for i, w := range weights {
		out[i] = n * w / total
		given += out[i]
	}
	for i := 0; given < n; i = (i + 1) % len(out) {
		if weights[i] > 0 {
			out[i]++
			given++
		}
	}
	return out
}

// spread divides n pods across zones evenly, then across each zone's
// clusters, then moves what a cluster has no room for to clusters that do.
// It returns pods per candidate, in candidate order.
func spread(n int64, cands []candidate) []int64 {
	var zones []string
	byZone := map[string][]int{}
	for i, c := range cands {
		z := c.cluster.Zone
		if _, ok := byZone[z]; !ok {
			zones = append(zones, z) // zones ordered by their best cluster
		}
		byZone[z] = append(byZone[z], i)
	}
	ones := func(k int) []int64 {
		w := make([]int64, k)
		for i := range w {
			w[i] = 1
		}
		return w
	}
	out := make([]int64, len(cands))
	for zi, share := range split(n, ones(len(zones))) {
		idx := byZone[zones[zi]]
		for j, s := range split(share, ones(len(idx))) {
			out[idx[j]] = s
		}
	}
	// Overflow: clusters asked for more than they have room for give the
	// excess to clusters with room, one at a time in turn. With no room anywhere the
	// excess stays (its pods wait inside the cluster).
	var excess int64
	for i, c := range cands {
		if out[i] > c.room {
			excess += out[i] - c.room
			out[i] = c.room
		}
	}
	for moved := true; excess > 0 && moved; {
		moved = false
		for i, c := range cands {
			if excess > 0 && out[i] < c.room {
				out[i]++
				excess--
				moved = true
			}
		}
	}
	for i := 0; excess > 0; i = (i + 1) % len(out) {
		out[i]++
		excess--
	}
	return out
}

// divideReplicas gives each candidate its share of the pods (spread).
func divideReplicas(_ *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard {
	var shards []api.Shard
	for i, n := range spread(int64(fw.Pods), cands) {
		if n > 0 {
			c := cands[i].cluster
			shards = append(shards, api.Shard{Cluster: c.Name, Zone: c.Zone, Replicas: int32(n)})
		}
	}
	sortShards(shards)
	return shards
}
