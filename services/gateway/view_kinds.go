package gateway

import (
	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

// kindStatusView adds what a CronJob's and a Daemon's statuses carry
// beyond the counts every kind has.
func kindStatusView(st *api.Status, v *computeapi.WorkloadStatus) {
	if c := st.CronJob; c != nil {
		cv := computeapi.CronJobStatus{Cluster: c.Cluster, Suspended: c.Suspended, Active: c.Active}
		if c.LastScheduleTime != nil {
			cv.LastScheduleTime = *c.LastScheduleTime
		}
		if c.LastSuccessfulTime != nil {
			cv.LastSuccessfulTime = *c.LastSuccessfulTime
		}
		for _, r := range c.Runs {
			rv := computeapi.CronJobRun{Name: r.Name, Cluster: r.Cluster, Outcome: computeapi.CronJobRunOutcome(r.Outcome), Succeeded: r.Succeeded, Failed: r.Failed}
			if r.ScheduledTime != nil {
				rv.ScheduledTime = *r.ScheduledTime
			}
			cv.Runs = append(cv.Runs, rv)
		}
		v.CronJob = cv
	}
	if d := st.Daemon; d != nil {
		dv := computeapi.DaemonStatus{Desired: d.Desired, Current: d.Current, Ready: d.Ready, Updated: d.Updated, Behind: d.Behind}
		if len(d.Clusters) > 0 {
			dv.Clusters = make(map[string]computeapi.DaemonCounts, len(d.Clusters))
			for name, c := range d.Clusters {
				dv.Clusters[name] = computeapi.DaemonCounts{Desired: c.Desired, Current: c.Current, Ready: c.Ready, Updated: c.Updated}
			}
		}
		v.Daemon = dv
	}
	trainingStatusView(st, v) // view_training.go
}
