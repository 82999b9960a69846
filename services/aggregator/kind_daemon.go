package aggregator

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"

	"atoll.dev/libs/api"
)

// The Daemon. A cluster's observation of a Daemon holds its DaemonSet's
// counters. The folder sums the clusters' counters and names the clusters
// behind.

// daemonKind is the Daemon's part of the aggregator.
type daemonKind struct{ basic }

// daemonPart is what a cluster holds of a Daemon beyond its pods.
type daemonPart struct {
	// DaemonSet is its DaemonSet, when there is one.
	DaemonSet *daemonSetObservation `json:"daemonSet,omitempty"`
}

// daemonSetObservation is a DaemonSet's counters in one cluster.
type daemonSetObservation struct {
	Generation int64 `json:"generation"`
	// Observed says its controller has seen its latest spec.
	Observed bool `json:"observed"`
	api.DaemonCounts
}

func (daemonKind) watches() []watch { return []watch{{daemonsets, ""}} }

func (daemonKind) observe(t *clusterTerm, key, name string, _ []*podView) (any, bool) {
	var ds *appsv1.DaemonSet
	for _, o := range t.objectsOf(daemonsets, key) {
		if d, ok := o.(*appsv1.DaemonSet); ok && d.Name == name {
			ds = d
		}
	}
	if ds == nil {
		return &daemonPart{}, false
	}
	return &daemonPart{DaemonSet: &daemonSetObservation{
		Generation: generationOf(ds.Annotations), Observed: ds.Status.ObservedGeneration >= ds.Generation,
		DaemonCounts: api.DaemonCounts{Desired: ds.Status.DesiredNumberScheduled, Current: ds.Status.CurrentNumberScheduled,
			Ready: ds.Status.NumberReady, Updated: ds.Status.UpdatedNumberScheduled},
	}}, true
}

func (daemonKind) part() any { return &daemonPart{} }

func (daemonKind) fold(w *api.Workload, shards []shardView, st *api.Status) {
	foldDaemon(w, shards, st)
}

func foldDaemon(w *api.Workload, shards []shardView, st *api.Status) {
	ds := &api.DaemonStatus{Clusters: map[string]api.DaemonCounts{}}
	sick := false
	for _, sh := range shards {
		o := sh.obs
		var c api.DaemonCounts
		done := false
		if d := partOf[daemonPart](o).DaemonSet; d != nil {
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
