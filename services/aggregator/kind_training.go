package aggregator

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/api"
)

// The TrainingJob. A cluster's observation of one holds its gang: the
// attempt its Job was rendered for (api.AnnoGangAttempt) and one rank per
// pod of that attempt (a pod of an older attempt, still terminating, is
// not counted), by its completion index. The folder reports the ranks and
// the phase: Running once every worker runs, Succeeded when the Job
// completes, Failed when it fails (backoffLimit 0: one failed worker
// fails it). foldGang adds what the scheduler keeps in the placement
// (api.GangState): the attempt, requeues, restarts and the next attempt;
// a gang taken down and waiting for its next attempt is Pending, with a
// Requeued condition.

// trainingKind is the TrainingJob's part of the aggregator.
type trainingKind struct{ basic }

// trainingPart is what a cluster holds of a TrainingJob beyond its pods.
type trainingPart struct {
	// Job is the gang's Job, when there is one; Gang its workers.
	Job  *jobObservation  `json:"job,omitempty"`
	Gang *gangObservation `json:"gang,omitempty"`
}

func (trainingKind) watches() []watch { return []watch{{jobs, "Job"}} }

func (trainingKind) observe(t *clusterTerm, key, name string, pods []*podView) (any, bool) {
	j := t.job(key, name)
	return &trainingPart{Job: observeJob(j), Gang: observeGang(pods, j)}, j != nil
}

func (trainingKind) part() any { return &trainingPart{} }

func (trainingKind) fold(w *api.Workload, shards []shardView, st *api.Status) {
	foldTraining(w, shards, st)
}

func (trainingKind) placed(w *api.Workload, p *api.PlacementDecision, st *api.Status) {
	foldGang(w, p, st)
}

func (trainingKind) left(part any) int32 {
	if p, _ := part.(*trainingPart); p != nil && p.Job != nil {
		return 1
	}
	return 0
}

// gangObservation is a TrainingJob's Job and workers in one cluster.
type gangObservation struct {
	// Attempt is the gang attempt the Job was rendered for.
	Attempt int32 `json:"attempt"`
	// Complete and Failed are the Job's conditions.
	Complete bool `json:"complete,omitempty"`
	Failed   bool `json:"failed,omitempty"`
	// Ranks are the pods of that attempt, by rank.
	Ranks []api.TrainingRank `json:"ranks,omitempty"`
}

// observeGang sums up a TrainingJob's gang: its Job (nil: none) and pods.
func observeGang(pods []*podView, job *batchv1.Job) *gangObservation {
	if job == nil {
		return nil
	}
	g := &gangObservation{Attempt: attemptOf(job.Annotations)}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			g.Complete = true
		case batchv1.JobFailed:
			g.Failed = true
		}
	}
	byRank := map[int32]api.TrainingRank{}
	for _, p := range pods {
		if p.Attempt != g.Attempt || p.Index < 0 {
			continue
		}
		r := api.TrainingRank{Rank: p.Index, Pod: p.Name, Phase: p.Phase.String(), Node: p.Node.String()}
		if r.Phase == "" {
			r.Phase = string(corev1.PodPending)
		}
		r.Restarts = p.Restarts
		old, seen := byRank[r.Rank]
		// A replacement pod of the same rank: the live one wins.
		if !seen || old.Phase == string(corev1.PodFailed) && !p.Deleting {
			byRank[r.Rank] = r
		}
	}
	for _, r := range byRank {
		g.Ranks = append(g.Ranks, r)
	}
	slices.SortFunc(g.Ranks, func(a, b api.TrainingRank) int { return int(a.Rank - b.Rank) })
	return g
}

func attemptOf(annotations map[string]string) int32 {
	n, _ := strconv.ParseInt(annotations[api.AnnoGangAttempt], 10, 32)
	return int32(n)
}

// foldTraining folds the gang's one shard: its ranks and phase.
func foldTraining(w *api.Workload, shards []shardView, st *api.Status) {
	s, ok := w.Spec.(*api.TrainingJobSpec)
	if !ok {
		st.Conditions = append(st.Conditions, api.Condition{Type: "Folded", Status: false, Reason: "InvalidSpec", Message: fmt.Sprintf("a TrainingJob with a %T spec", w.Spec)})
		return
	}
	tr := &api.TrainingStatus{Workers: s.Workers}
	st.Training = tr
	st.Phase = api.PhaseScheduled
	st.Desired = s.Workers
	for _, sh := range shards {
		o := sh.obs
		addTo(st, sh, api.ZoneStatus{Desired: s.Workers, Ready: o.Ready, Running: o.Running, Succeeded: o.Succeeded, Failed: o.Failed})
		tr.Cluster = sh.cluster
		st.Conditions = append(st.Conditions, o.Unscheduled...)
		g := partOf[trainingPart](o).Gang
		if g == nil {
			continue
		}
		tr.Attempt = g.Attempt
		tr.Ranks = g.Ranks
		running := 0
		for _, r := range g.Ranks {
			if r.Phase == string(corev1.PodRunning) {
				running++
			}
		}
		switch {
		case g.Failed:
			st.Phase = api.PhaseFailed
		case g.Complete:
			st.Phase = api.PhaseSucceeded
		case !sh.healthy:
			st.Phase = api.PhaseDegraded
		case running == int(s.Workers):
			st.Phase = api.PhaseRunning
		case running > 0:
			st.Phase = api.PhaseProgressing
		}
		st.Conditions = append(st.Conditions, api.Condition{Type: "GangReady", Status: running == int(s.Workers),
			Reason: fmt.Sprintf("%d/%d workers Running", running, s.Workers)})
	}
}

// foldGang adds the scheduler's gang state (the placement's) to a
// TrainingJob's status; a gang waiting for its next attempt is Pending.
func foldGang(w *api.Workload, p *api.PlacementDecision, st *api.Status) {
	if p == nil || p.Gang == nil {
		return
	}
	s, ok := w.Spec.(*api.TrainingJobSpec)
	if !ok {
		return
	}
	tr := st.Training
	if tr == nil {
		tr = &api.TrainingStatus{Workers: s.Workers}
		st.Training = tr
	}
	g := p.Gang
	tr.Requeues, tr.Restarts, tr.NextAttempt, tr.ReadyAt, tr.LastRequeue = g.Requeues, g.Restarts, g.NextAttempt, g.ReadyAt, g.LastRequeue
	if tr.Attempt == 0 {
		tr.Attempt = g.Attempt
	}
	if !g.PlacedAt.IsZero() && len(p.Shards) > 0 {
		at := g.PlacedAt
		tr.PlacedAt = &at
	}
	if len(p.Shards) == 0 && g.NextAttempt != nil && !w.Control.Stopped {
		st.Phase = api.PhasePending
		st.Conditions = append(st.Conditions, api.Condition{Type: "Requeued", Status: true, Reason: "WaitForPodsReady",
			Message: fmt.Sprintf("requeue %d: %s; placed again after %s", g.Requeues, g.LastRequeue, g.NextAttempt.Format(time.RFC3339))})
	}
}
