package scheduler

import (
	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// The Daemon. A Daemon is placed in every cluster that passes its filters
// (api.Kind.EveryCluster): its placement stands only while that set is
// unchanged, so a cluster that joins, or starts to match its cluster
// selector, gets its shard at the replay that follows the cluster's
// schedulability change.

// daemonKind is the Daemon's hooks.
type daemonKind struct{ defaults }

func (daemonKind) divide(w *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard {
	return everyCandidate(w, fw, cands)
}

// stands says whether the Daemon's placement still covers exactly the
// clusters that pass its filters now.
func (daemonKind) stands(s *Service, prev *api.PlacementDecision, w *api.Workload, snap []*api.ClusterInfo) bool {
	now := s.kinds.decide(w, snap, prev.Decided, framework.Options{}).Decision
	if len(now.Shards) != len(prev.Shards) {
		return false
	}
	for i := range now.Shards {
		if now.Shards[i].Cluster != prev.Shards[i].Cluster {
			return false
		}
	}
	return true
}

// everyCandidate gives every candidate a shard; a shard's pods follow the
// cluster's nodes, so it counts none.
func everyCandidate(_ *api.Workload, _ *framework.Workload, cands []candidate) []api.Shard {
	shards := make([]api.Shard, 0, len(cands))
	for _, c := range cands {
		shards = append(shards, api.Shard{Cluster: c.cluster.Name, Zone: c.cluster.Zone})
	}
	sortShards(shards)
	return shards
}
