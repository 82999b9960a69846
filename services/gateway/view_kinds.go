package gateway

import (
	"net/http"
	"strings"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

// kindViews is each kind's part of its status view, beyond the counts
// every kind has (statusView); nil when the counts say it all. Every
// registered kind has an entry (TestEveryKindHasAView).
var kindViews = map[string]func(*api.Status, *computeapi.WorkloadStatus){
	api.KindApp:         appStatusView, // its rollout is GET .../apps/{app}/rollout (rollouts.go)
	api.KindJobSet:      nil,
	api.KindPod:         podStatusView, // view_pod.go
	api.KindCronJob:     cronJobStatusView,
	api.KindDaemon:      daemonStatusView,
	api.KindTrainingJob: trainingStatusView, // view_training.go
	api.KindScaler:      nil,                // its decisions are GET .../scalers/{name}/history (scalers.go)
	api.KindConfig:      nil,
	api.KindSecret:      nil, // its spec's view hides its values (view_secret.go)
}

// kindStatusView adds what kind's status carries beyond the counts.
func kindStatusView(kind string, st *api.Status, v *computeapi.WorkloadStatus) {
	if view := kindViews[kind]; view != nil {
		view(st, v)
	}
}

// ListKinds lists the registered kinds and what applies to each, for
// clients to show only that (the console's buttons and panels).
func (s *Service) ListKinds(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, kindList())
}

func kindList() computeapi.KindList {
	out := computeapi.KindList{Items: []computeapi.KindInfo{}}
	for _, k := range api.Kinds() {
		out.Items = append(out.Items, computeapi.KindInfo{
			Name: k.Name, Path: strings.ToLower(k.Name),
			Placed: !k.Unplaced, AdminOnly: k.AdminOnly, EveryCluster: k.EveryCluster,
			Pods: !k.NoPods, Ops: append([]string{}, k.Ops...),
		})
	}
	return out
}

// appStatusView adds an exposed App's host and Ingress addresses.
func appStatusView(st *api.Status, v *computeapi.WorkloadStatus) {
	e := st.Expose
	if e == nil {
		return
	}
	v.Expose = computeapi.ExposeStatus{Host: e.Host, Path: e.Path, Ingresses: e.Ingresses}
	for _, a := range e.Addresses {
		v.Expose.Addresses = append(v.Expose.Addresses, computeapi.IngressAddress{Cluster: a.Cluster, Zone: a.Zone, Ip: a.IP, Hostname: a.Hostname})
	}
}

// cronJobStatusView adds a CronJob's cluster, times and runs.
func cronJobStatusView(st *api.Status, v *computeapi.WorkloadStatus) {
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
}

// daemonStatusView adds a Daemon's counts, in total and per cluster, and
// the clusters behind.
func daemonStatusView(st *api.Status, v *computeapi.WorkloadStatus) {
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
}
