package gateway

import (
	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

// trainingStatusView adds a TrainingJob's gang (requeues, restarts, next
// attempt) and its workers by rank.
func trainingStatusView(st *api.Status, v *computeapi.WorkloadStatus) {
	tr := st.Training
	if tr == nil {
		return
	}
	tv := computeapi.TrainingStatus{Cluster: tr.Cluster, Workers: tr.Workers, Attempt: tr.Attempt,
		Requeues: tr.Requeues, Restarts: tr.Restarts, LastRequeue: tr.LastRequeue}
	if tr.NextAttempt != nil {
		tv.NextAttempt = *tr.NextAttempt
	}
	if tr.PlacedAt != nil {
		tv.PlacedAt = *tr.PlacedAt
	}
	if tr.ReadyAt != nil {
		tv.ReadyAt = *tr.ReadyAt
	}
	for _, r := range tr.Ranks {
		tv.Ranks = append(tv.Ranks, computeapi.TrainingRank{Rank: r.Rank, Pod: r.Pod, Phase: r.Phase, Node: r.Node, Restarts: r.Restarts})
	}
	v.Training = tv
}
