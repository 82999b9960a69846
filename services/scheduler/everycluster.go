package scheduler

import (
	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// The CronJob and the Daemon. A CronJob is placed like a Pod, in ONE
// cluster (the best candidate), so it fires once per schedule time in the
// region; its placement is sticky like every other and moves only when
// its cluster stops passing the health filter (see api.KindCronJob for
// why a move never fires a schedule time twice). A Daemon is placed in
// every cluster that passes its filters (api.Kind.EveryCluster): its
// placement stands only while that set is unchanged, so a cluster that
// joins, or starts to match its cluster selector, gets its shard at the
// replay that follows the cluster's schedulability change.
func init() {
	dividers[api.KindCronJob] = oneCluster
	dividers[api.KindDaemon] = everyCandidate
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

// everyClusterStands says whether the placement of an EveryCluster kind
// still covers exactly the clusters that pass its filters now; for other
// kinds it is always true (stillGood's health rule decides).
func everyClusterStands(prev *api.PlacementDecision, w *api.Workload, snap []*api.ClusterInfo) bool {
	if !api.EveryCluster(w.Kind) {
		return true
	}
	now := Decide(w, snap, prev.Decided)
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
