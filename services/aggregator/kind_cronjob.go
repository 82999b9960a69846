package aggregator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/api"
)

// The CronJob. A cluster's observation of a CronJob holds its CronJob's
// status and the Jobs it made (labelled as the workload, see the
// propagator). The folder reports the schedule and the runs of the
// cluster that holds it; it never reports Succeeded or Failed (a CronJob
// does not finish, and the scheduler stops placing finished work). A
// paused CronJob is suspended: Paused once its CronJob says so.

// cronJobKind is the CronJob's part of the aggregator.
type cronJobKind struct{ basic }

// cronJobPart is what a cluster holds of a CronJob beyond its pods.
type cronJobPart struct {
	// CronJob is its CronJob, when there is one; Runs the Jobs it made.
	CronJob *cronJobObservation `json:"cronJob,omitempty"`
	Runs    []runObservation    `json:"runs,omitempty"`
}

func (cronJobKind) watches() []watch { return []watch{{cronjobs, ""}, {jobs, "Job"}} }

func (cronJobKind) observe(t *clusterTerm, key, name string, _ []*podView) (any, bool) {
	cj, runs := t.cronJobObjects(key, name)
	p := &cronJobPart{}
	observeCronJob(p, cj, runs)
	return p, cj != nil || len(runs) > 0
}

func (cronJobKind) part() any { return &cronJobPart{} }

func (cronJobKind) fold(w *api.Workload, shards []shardView, st *api.Status) {
	foldCronJob(w, shards, st)
}

// paused: its CronJob is suspended.
func (cronJobKind) paused(_ *api.Workload, _ []shardView, st *api.Status) (done, final bool) {
	return st.Phase == api.PhasePaused, false
}

// cronJobObservation is a CronJob's status in one cluster.
type cronJobObservation struct {
	Generation         int64      `json:"generation"`
	Suspended          bool       `json:"suspended,omitempty"`
	LastScheduleTime   *time.Time `json:"lastScheduleTime,omitempty"`
	LastSuccessfulTime *time.Time `json:"lastSuccessfulTime,omitempty"`
	Active             int32      `json:"active,omitempty"`
}

// runObservation is one Job a CronJob made.
type runObservation struct {
	Name          string     `json:"name"`
	ScheduledTime *time.Time `json:"scheduledTime,omitempty"`
	Outcome       string     `json:"outcome"`
	Succeeded     int32      `json:"succeeded,omitempty"`
	Failed        int32      `json:"failed,omitempty"`
}

// cronJobObjects returns the CronJob of the workload key and its runs in
// the term's caches.
func (t *clusterTerm) cronJobObjects(key, name string) (cj *batchv1.CronJob, runs []*batchv1.Job) {
	for _, o := range t.objectsOf(cronjobs, key) {
		if c, ok := o.(*batchv1.CronJob); ok && c.Name == name {
			cj = c
		}
	}
	for _, o := range t.objectsOf(jobs, key) {
		if j, ok := o.(*batchv1.Job); ok && j.Name != name {
			runs = append(runs, j)
		}
	}
	return cj, runs
}

// observeCronJob adds the CronJob and its runs to obs.
func observeCronJob(obs *cronJobPart, cj *batchv1.CronJob, runs []*batchv1.Job) {
	if cj != nil {
		o := &cronJobObservation{Generation: generationOf(cj.Annotations), Suspended: cj.Spec.Suspend != nil && *cj.Spec.Suspend, Active: int32(len(cj.Status.Active))}
		if t := cj.Status.LastScheduleTime; t != nil {
			o.LastScheduleTime = ptrTime(t.UTC())
		}
		if t := cj.Status.LastSuccessfulTime; t != nil {
			o.LastSuccessfulTime = ptrTime(t.UTC())
		}
		obs.CronJob = o
	}
	for _, j := range runs {
		r := runObservation{Name: j.Name, Outcome: api.RunActive, Succeeded: j.Status.Succeeded, Failed: j.Status.Failed}
		if at, err := time.Parse(time.RFC3339, j.Annotations[batchv1.CronJobScheduledTimestampAnnotation]); err == nil {
			r.ScheduledTime = ptrTime(at.UTC())
		}
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				r.Outcome = api.RunSucceeded
			case batchv1.JobFailed:
				r.Outcome = api.RunFailed
			}
		}
		obs.Runs = append(obs.Runs, r)
	}
	slices.SortFunc(obs.Runs, func(a, b runObservation) int { return strings.Compare(a.Name, b.Name) })
}

func ptrTime(t time.Time) *time.Time { return &t }

func foldCronJob(w *api.Workload, shards []shardView, st *api.Status) {
	cs := &api.CronJobStatus{}
	st.Phase = api.PhaseScheduled
	st.Desired = w.Spec.Pods()
	for _, sh := range shards {
		o := sh.obs
		addTo(st, sh, api.ZoneStatus{Desired: st.Desired, Ready: o.Ready, Running: o.Running, Succeeded: o.Succeeded, Failed: o.Failed})
		cs.Cluster = sh.cluster
		part := partOf[cronJobPart](o)
		for _, r := range part.Runs {
			cs.Runs = append(cs.Runs, api.CronJobRun{Name: r.Name, Cluster: sh.cluster, ScheduledTime: r.ScheduledTime, Outcome: r.Outcome, Succeeded: r.Succeeded, Failed: r.Failed})
		}
		c := part.CronJob
		switch {
		case !sh.healthy:
			st.Phase = api.PhaseDegraded
			st.Conditions = append(st.Conditions, api.Condition{Type: "ClustersHealthy", Status: false, Reason: "ClusterUnhealthy",
				Message: fmt.Sprintf("cluster %s is unhealthy; the CronJob is being moved", sh.cluster)})
		case c == nil:
		case c.Suspended:
			st.Phase = api.PhasePaused
		default:
			st.Phase = api.PhaseRunning
		}
		if c != nil {
			cs.LastScheduleTime, cs.LastSuccessfulTime, cs.Suspended, cs.Active = c.LastScheduleTime, c.LastSuccessfulTime, c.Suspended, c.Active
		}
	}
	slices.SortFunc(cs.Runs, func(a, b api.CronJobRun) int {
		if a.ScheduledTime != nil && b.ScheduledTime != nil {
			if c := a.ScheduledTime.Compare(*b.ScheduledTime); c != 0 {
				return c
			}
		}
		return strings.Compare(a.Name, b.Name)
	})
	st.CronJob = cs
}
