package aggregator

import (
	"fmt"

	"atoll.dev/libs/api"
	appsv1 "k8s.io/api/apps/v1"
)

// The App: a cluster's observation of one holds its shard's Deployment;
// the folder reports Running once every shard's Deployment has rolled out
// this generation and every desired pod is ready. A paused App's
// Deployments are held at zero, so it desires nothing, and is Paused once
// its pods are gone.

// appKind is the App's part of the aggregator.
type appKind struct{ basic }

// appPart is what a cluster holds of an App beyond its pods.
type appPart struct {
	// Deployment is the shard's Deployment, when there is one.
	Deployment *deploymentObservation `json:"deployment,omitempty"`
	// EndpointsObservation holds the pods' endpoints (endpoints.go),
	// which the propagator reads.
	api.EndpointsObservation
	// Ingress is the shard's Ingress, when the App is exposed (expose.go).
	Ingress *ingressObservation `json:"ingress,omitempty"`
	// Templates counts the live pods by the template revision they say
	// they run (api.AnnoTemplate, on the pods of an App that updates in
	// place), for api.ZoneStatus.Templates.
	Templates map[string]int32 `json:"templates,omitempty"`
}

type deploymentObservation struct {
	// Generation is the workload generation the Deployment was rendered for.
	Generation int64 `json:"generation"`
	// Observed says its controller has seen its latest spec.
	Observed  bool  `json:"observed"`
	Replicas  int32 `json:"replicas"`
	Updated   int32 `json:"updated"`
	Available int32 `json:"available"`
	// Template is the hash of the pod template it runs (api.AnnoTemplate),
	// for zone-by-zone rollouts (rollouts.go).
	Template string `json:"template,omitempty"`
	// Failing counts pods of its current template that failed or
	// crash-loop (rollouts_observe.go).
	Failing int32 `json:"failing,omitempty"`
}

func (appKind) watches() []watch {
	return []watch{{deployments, "Deployment"}, {statefulsets, "StatefulSet"}, {ingresses, ""}}
}

func (appKind) observe(t *clusterTerm, key, name string, pods []*podView) (any, bool) {
	var dep *appsv1.Deployment
	for _, o := range t.objectsOf(deployments, key) {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == name {
			dep = d
		}
	}
	eps := t.endpoints(pods)
	ing := t.ingress(key, name)
	revs := templatesOf(pods)
	if dep == nil {
		if ss := t.statefulSet(key, name); ss != nil { // kind_app_stateful.go
			return &appPart{EndpointsObservation: eps, Ingress: ing, Templates: revs, Deployment: statefulObservation(ss, pods)}, true
		}
		return &appPart{EndpointsObservation: eps, Ingress: ing, Templates: revs}, false
	}
	return &appPart{EndpointsObservation: eps, Ingress: ing, Templates: revs, Deployment: &deploymentObservation{
		Generation: generationOf(dep.Annotations), Observed: dep.Status.ObservedGeneration >= dep.Generation,
		Replicas: dep.Status.Replicas, Updated: dep.Status.UpdatedReplicas, Available: dep.Status.AvailableReplicas,
		Template: dep.Annotations[api.AnnoTemplate],
		Failing:  failingPods(pods, dep),
	}}, true
}

func (appKind) part() any { return &appPart{} }

func (appKind) fold(w *api.Workload, shards []shardView, st *api.Status) {
	if w.Control.Paused {
		// A paused App's Deployments are held at zero.
		st.Desired = 0
		for i := range shards {
			shards[i].desired = 0
		}
	}
	foldApp(w, shards, st)
}

// paused: an App's Deployments at zero with no pod left (foldApp calls
// that Running, with nothing desired).
func (appKind) paused(_ *api.Workload, _ []shardView, st *api.Status) (done, final bool) {
	return st.Phase == api.PhaseRunning, false
}

func (appKind) left(part any) int32 {
	if p, _ := part.(*appPart); p != nil && p.Deployment != nil {
		return 1
	}
	return 0
}

func foldApp(w *api.Workload, shards []shardView, st *api.Status) {
	gen := w.Metadata.Generation
	rolled, sick := true, false
	waits := api.WaitsOnZoneLoss(w)
	var waiting []shardView
	for _, sh := range shards {
		o := sh.obs
		if waits && !sh.healthy {
			// Its replicas wait, pending, where their claims are
			// (kind_app_stateful.go): nothing there counts as running.
			o.Ready, o.Running = 0, 0
			waiting = append(waiting, sh)
			rolled = false
			addTo(st, sh, api.ZoneStatus{Desired: sh.desired})
			continue
		}
		addTo(st, sh, api.ZoneStatus{Desired: sh.desired, Ready: o.Ready, Running: o.Running, Templates: partOf[appPart](o).Templates, Sidecars: o.Sidecars})
		d := partOf[appPart](o).Deployment
		if d == nil || d.Generation != gen || !d.Observed ||
			d.Updated != sh.desired || d.Replicas != sh.desired || d.Available != sh.desired || o.Ready != sh.desired {
			rolled = false
		}
		sick = sick || !sh.healthy
	}
	switch {
	case len(waiting) > 0:
		st.Phase = api.PhaseDegraded
		st.Conditions = append(st.Conditions, waitingCondition(w, waiting))
	case sick:
		st.Phase = api.PhaseDegraded
		st.Conditions = append(st.Conditions, api.Condition{Type: "ClustersHealthy", Status: false, Reason: "ClusterUnhealthy", Message: "a shard's cluster is unhealthy; it is being moved"})
	case rolled && st.Ready == st.Desired:
		st.Phase = api.PhaseRunning
	case st.Ready == 0 && st.Running == 0:
		st.Phase = api.PhaseScheduled
	default:
		st.Phase = api.PhaseProgressing
	}
	st.Conditions = append(st.Conditions, api.Condition{Type: "Available", Status: st.Ready == st.Desired, Reason: fmt.Sprintf("%d/%d ready", st.Ready, st.Desired)})
	foldExpose(w, shards, st)
}

// templatesOf counts the pods that are not terminating by their
// api.AnnoTemplate; nil when none says.
func templatesOf(pods []*podView) map[string]int32 {
	var out map[string]int32
	for _, p := range pods {
		rev := p.Template.String()
		if rev == "" || p.Deleting {
			continue
		}
		if out == nil {
			out = map[string]int32{}
		}
		out[rev]++
	}
	return out
}
