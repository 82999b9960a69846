package aggregator

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/api"
)

// The JobSet: a cluster's observation of one holds its shard's Indexed
// Job; a shard wants its index range. The folder sums the Jobs'
// completions: Succeeded once they reach the JobSet's, Failed when a Job
// fails. A paused JobSet's Jobs are suspended; it is Paused once none is
// active.

// jobSetKind is the JobSet's part of the aggregator.
type jobSetKind struct{ basic }

// jobPart is what a cluster holds of a JobSet beyond its pods.
type jobPart struct {
	// Job is the shard's Job, when there is one.
	Job *jobObservation `json:"job,omitempty"`
}

type jobObservation struct {
	// Generation is the workload generation the Job was rendered for.
	Generation int64 `json:"generation"`
	Active     int32 `json:"active,omitempty"`
	Succeeded  int32 `json:"succeeded,omitempty"`
	Failed     int32 `json:"failed,omitempty"`
	// FailedCondition is its JobFailed condition.
	FailedCondition bool `json:"failedCondition,omitempty"`
	// Suspended is spec.suspend with the JobSuspended condition true.
	Suspended bool `json:"suspended,omitempty"`
}

func (jobSetKind) watches() []watch { return []watch{{jobs, "Job"}} }

func (jobSetKind) observe(t *clusterTerm, key, name string, _ []*podView) (any, bool) {
	j := t.job(key, name)
	return &jobPart{Job: observeJob(j)}, j != nil
}

func (jobSetKind) part() any { return &jobPart{} }

// desired is the shard's index range.
func (jobSetKind) desired(sh api.Shard) int32 { return sh.IndexEnd - sh.IndexStart }

func (jobSetKind) fold(w *api.Workload, shards []shardView, st *api.Status) {
	foldJobSet(w, shards, st)
}

// paused: every Job suspended with none active; a finished JobSet keeps
// Succeeded or Failed.
func (jobSetKind) paused(w *api.Workload, shards []shardView, st *api.Status) (done, final bool) {
	if st.Phase == api.PhaseSucceeded || st.Phase == api.PhaseFailed {
		return false, true
	}
	done = true
	for _, sh := range shards {
		done = done && jobSuspended(partOf[jobPart](sh.obs).Job, w.Metadata.Generation)
	}
	return done, false
}

func (jobSetKind) left(part any) int32 {
	if p, _ := part.(*jobPart); p != nil && p.Job != nil {
		return 1
	}
	return 0
}

// job returns the workload key's Job named name in the term's caches.
func (t *clusterTerm) job(key, name string) *batchv1.Job {
	var job *batchv1.Job
	for _, o := range t.objectsOf(jobs, key) {
		if j, ok := o.(*batchv1.Job); ok && j.Name == name {
			job = j
		}
	}
	return job
}

// observeJob sums up a Job (nil: none).
func observeJob(j *batchv1.Job) *jobObservation {
	if j == nil {
		return nil
	}
	jo := &jobObservation{Generation: generationOf(j.Annotations), Active: j.Status.Active, Succeeded: j.Status.Succeeded, Failed: j.Status.Failed}
	for _, c := range j.Status.Conditions {
		switch {
		case c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue:
			jo.FailedCondition = true
		case c.Type == batchv1.JobSuspended && c.Status == corev1.ConditionTrue:
			jo.Suspended = j.Spec.Suspend != nil && *j.Spec.Suspend
		}
	}
	return jo
}

func foldJobSet(w *api.Workload, shards []shardView, st *api.Status) {
	js, ok := w.Spec.(*api.JobSetSpec)
	if !ok {
		st.Conditions = append(st.Conditions, api.Condition{Type: "Folded", Status: false, Reason: "InvalidSpec", Message: fmt.Sprintf("a JobSet with a %T spec", w.Spec)})
		return
	}
	failed := false
	for _, sh := range shards {
		zs := api.ZoneStatus{Desired: sh.desired, Ready: sh.obs.Ready, Running: sh.obs.Running}
		if j := partOf[jobPart](sh.obs).Job; j != nil {
			zs.Succeeded, zs.Failed = j.Succeeded, j.Failed
			failed = failed || j.FailedCondition
		}
		addTo(st, sh, zs)
	}
	st.Desired = js.Completions
	switch {
	case failed:
		st.Phase = api.PhaseFailed
	case st.Succeeded >= js.Completions:
		st.Phase = api.PhaseSucceeded
	case st.Running > 0 || st.Succeeded > 0:
		st.Phase = api.PhaseRunning
	default:
		st.Phase = api.PhaseScheduled
	}
}

func jobSuspended(j *jobObservation, gen int64) bool {
	return j != nil && j.Generation == gen && j.Suspended && j.Active == 0
}
