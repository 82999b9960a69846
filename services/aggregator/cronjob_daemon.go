package aggregator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/api"
)

// The CronJob and the Daemon. A cluster's observation of a CronJob holds
// its CronJob's status and the Jobs it made (labelled as the workload, see
// the propagator); of a Daemon, its DaemonSet's counters. The CronJob's
// folder reports the schedule and the runs of the cluster that holds it;
// it never reports Succeeded or Failed (a CronJob does not finish, and the
// scheduler stops placing finished work). The Daemon's folder sums the
// clusters' counters and names the clusters behind.

func init() {
	folders[api.KindCronJob] = foldCronJob
	folders[api.KindDaemon] = foldDaemon
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

// daemonSetObservation is a DaemonSet's counters in one cluster.
type daemonSetObservation struct {
	Generation int64 `json:"generation"`
	// Observed says its controller has seen its latest spec.
	Observed bool `json:"observed"`
	api.DaemonCounts
}

// kindObjects returns the CronJob, the DaemonSet and the CronJob's runs of
// the workload key in the term's caches.
func (t *clusterTerm) kindObjects(key, name string) (cj *batchv1.CronJob, ds *appsv1.DaemonSet, runs []*batchv1.Job) {
	if objs, err := t.cronjobs.ByIndex(byWorkload, key); err == nil {
		for _, o := range objs {
			if c, ok := o.(*batchv1.CronJob); ok && c.Name == name {
				cj = c
			}
		}
	}
	if objs, err := t.daemonsets.ByIndex(byWorkload, key); err == nil {
		for _, o := range objs {
			if d, ok := o.(*appsv1.DaemonSet); ok && d.Name == name {
				ds = d
			}
		}
	}
	if _, kind, _, err := api.ParseKey(key); err == nil && kind == api.KindCronJob {
		if objs, err := t.jobs.ByIndex(byWorkload, key); err == nil {
			for _, o := range objs {
				if j, ok := o.(*batchv1.Job); ok && j.Name != name {
					runs = append(runs, j)
				}
			}
		}
	}
	return cj, ds, runs
}

// observeKinds adds the CronJob, DaemonSet and runs to an observation.
func observeKinds(obs *observation, cj *batchv1.CronJob, ds *appsv1.DaemonSet, runs []*batchv1.Job) {
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
	if ds != nil {
		obs.DaemonSet = &daemonSetObservation{
			Generation: generationOf(ds.Annotations), Observed: ds.Status.ObservedGeneration >= ds.Generation,
			DaemonCounts: api.DaemonCounts{Desired: ds.Status.DesiredNumberScheduled, Current: ds.Status.CurrentNumberScheduled,
				Ready: ds.Status.NumberReady, Updated: ds.Status.UpdatedNumberScheduled},
		}
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
		for _, r := range o.Runs {
			cs.Runs = append(cs.Runs, api.CronJobRun{Name: r.Name, Cluster: sh.cluster, ScheduledTime: r.ScheduledTime, Outcome: r.Outcome, Succeeded: r.Succeeded, Failed: r.Failed})
		}
		c := o.CronJob
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

func foldDaemon(w *api.Workload, shards []shardView, st *api.Status) {
	ds := &api.DaemonStatus{Clusters: map[string]api.DaemonCounts{}}
	sick := false
	for _, sh := range shards {
		o := sh.obs
		var c api.DaemonCounts
		done := false
		if d := o.DaemonSet; d != nil {
			c = d.DaemonCounts
			done = d.Observed && d.Generation == w.Metadata.Generation && c.Updated == c.Desired && c.Ready == c.Desired && c.Current == c.Desired
		}
		done = done && sh.healthy
		sick = sick || !sh.healthy
		ds.Clusters[sh.cluster] = c
		ds.Desired += c.Desired
		ds.Current += c.Current
		ds.Ready += c.Ready
		ds.Updated += c.Updated
		if !done {
			ds.Behind = append(ds.Behind, sh.cluster)
		}
		addTo(st, sh, api.ZoneStatus{Desired: c.Desired, Ready: o.Ready, Running: o.Running})
	}
	slices.Sort(ds.Behind)
	st.Desired = ds.Desired
	st.Daemon = ds
	switch {
	case sick:
		st.Phase = api.PhaseDegraded
		st.Conditions = append(st.Conditions, api.Condition{Type: "ClustersHealthy", Status: false, Reason: "ClusterUnhealthy", Message: "a cluster of the Daemon is unhealthy"})
	case len(shards) > 0 && len(ds.Behind) == 0:
		st.Phase = api.PhaseRunning
	case st.Running == 0:
		st.Phase = api.PhaseScheduled
	default:
		st.Phase = api.PhaseProgressing
	}
	msg := fmt.Sprintf("%d/%d ready", ds.Ready, ds.Desired)
	if len(ds.Behind) > 0 {
		msg += "; behind: " + strings.Join(ds.Behind, ", ")
	}
	reason := "AllClustersDone"
	if len(ds.Behind) > 0 {
		reason = "ClustersBehind"
	}
	st.Conditions = append(st.Conditions, api.Condition{Type: "Available", Status: len(ds.Behind) == 0, Reason: reason, Message: msg})
}
