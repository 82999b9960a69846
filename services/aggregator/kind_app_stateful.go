package aggregator

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"

	"atoll.dev/libs/api"
)

// The stateful App: an App with claim templates is a StatefulSet per
// shard (services/propagator kind_app_stateful.go). Its observation is the
// Deployment form's, read from the StatefulSet, so the fold and the
// zone-by-zone rollout treat both forms alike. While a shard's cluster is
// lost and the App waits for it (api.WaitsOnZoneLoss), that shard's
// replicas count as pending, and a condition names the zones waited for.

var statefulsets = appsv1.SchemeGroupVersion.WithResource("statefulsets")

// statefulSet returns the workload key's StatefulSet named name, if any.
func (t *clusterTerm) statefulSet(key, name string) *appsv1.StatefulSet {
	for _, o := range t.objectsOf(statefulsets, key) {
		if ss, ok := o.(*appsv1.StatefulSet); ok && ss.Name == name {
			return ss
		}
	}
	return nil
}

// statefulObservation reads a StatefulSet as a shard's Deployment.
func statefulObservation(ss *appsv1.StatefulSet, pods []*podView) *deploymentObservation {
	return &deploymentObservation{
		Generation: generationOf(ss.Annotations), Observed: ss.Status.ObservedGeneration >= ss.Generation,
		Replicas: ss.Status.Replicas, Updated: ss.Status.UpdatedReplicas, Available: ss.Status.AvailableReplicas,
		Template: ss.Annotations[api.AnnoTemplate],
		Failing:  failingPods(pods, &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: ss.Spec.Template}}),
	}
}

// waitingCondition says which lost zones an App's replicas wait for.
func waitingCondition(w *api.Workload, waiting []shardView) api.Condition {
	var zones []string
	var n int32
	for _, sh := range waiting {
		zones = append(zones, fmt.Sprintf("%s (cluster %s)", sh.zone, sh.cluster))
		n += sh.desired
	}
	slices.Sort(zones)
	return api.Condition{Type: "ClustersHealthy", Status: false, Reason: api.ReasonWaitingForZone,
		Message: fmt.Sprintf("zone %s lost: %d replica(s) of %s stay pending there until it returns, where their claims and data are (onZoneLoss: %s; Recreate would start them elsewhere with empty claims)",
			strings.Join(zones, ", "), n, w.Metadata.Name, api.ZoneLossWait)}
}
