package scheduler

import (
	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// The JobSet: its parallelism spread like an App's replicas, each shard
// given a contiguous range of the completion indexes.
type jobSetKind struct{ defaults }

func (jobSetKind) divide(w *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard {
	return divideIndexes(w, fw, cands)
}

// divideIndexes spreads a JobSet's parallelism like replicas, then gives
// each shard a contiguous index range proportional to its parallelism.
func divideIndexes(w *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard {
	js := w.Spec.(*api.JobSetSpec)
	shards := divideReplicas(w, fw, cands)
	weights := make([]int64, len(shards))
	for i, s := range shards {
		weights[i] = int64(s.Replicas)
	}
	var start int32
	for i, n := range split(int64(js.Completions), weights) {
		shards[i].IndexStart, shards[i].IndexEnd = start, start+int32(n)
		start += int32(n)
	}
	return shards
}
