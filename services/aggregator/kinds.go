package aggregator

import (
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"atoll.dev/libs/api"
)

// kind is what a workload kind provides to the aggregator: on a cluster's
// side, which objects it reads and what they say (observe); on the
// folder's, how the shards' observations become the workload's status
// (fold). Each kind's implementation is in its file (kind_<name>.go);
// newKinds lists them. A kind embeds basic for the steps it has nothing
// to add to.
type kind interface {
	// watches lists the objects its shards become in a member cluster,
	// besides their pods, which every cluster term watches.
	watches() []watch
	// observe reads the kind's objects of the workload key (its objects
	// named name) from the term's caches, beside its pods: the
	// observation's part (a pointer, see observation.Part) and whether it
	// found any of them. Without any, and without pods, the cluster holds
	// nothing of the workload.
	observe(t *clusterTerm, key, name string, pods []*podView) (part any, found bool)
	// part returns an empty part to decode a stored observation's into.
	part() any
	// desired is what one shard of the placement wants.
	desired(sh api.Shard) int32
	// fold computes the phase and counts of a placed workload from its
	// shards.
	fold(w *api.Workload, shards []shardView, st *api.Status)
	// paused says whether a paused workload has let its pods go (done),
	// or keeps the phase fold gave it (final: it finished).
	paused(w *api.Workload, shards []shardView, st *api.Status) (done, final bool)
	// placed adds to any status of the kind what its placement says
	// beyond its shards (a TrainingJob's gang).
	placed(w *api.Workload, p *api.PlacementDecision, st *api.Status)
	// left counts the kind's objects (besides pods) an observation's part
	// shows while the workload stops.
	left(part any) int32
}

// watch is a kind of Kubernetes object a kind reads in member clusters.
type watch struct {
	gvr schema.GroupVersionResource
	// events is the Kubernetes kind of these objects when their
	// Kubernetes events are the workload's; "" when they are not followed.
	events string
}

// The objects the kinds watch.
var (
	deployments = appsv1.SchemeGroupVersion.WithResource("deployments")
	jobs        = batchv1.SchemeGroupVersion.WithResource("jobs")
	cronjobs    = batchv1.SchemeGroupVersion.WithResource("cronjobs")
	daemonsets  = appsv1.SchemeGroupVersion.WithResource("daemonsets")
	claims      = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
)

// newKinds returns the kinds the aggregator observes and folds, by name.
// Adding a kind means adding it here (TestKindsTable fails until then).
func newKinds() map[string]kind {
	return map[string]kind{
		api.KindApp:         appKind{},
		api.KindCronJob:     cronJobKind{},
		api.KindDaemon:      daemonKind{},
		api.KindJobSet:      jobSetKind{},
		api.KindPod:         podKind{},
		api.KindTrainingJob: trainingKind{},
	}
}

// Kinds lists the kinds whose statuses the aggregator folds, sorted.
func (s *Service) Kinds() []string { return slices.Sorted(maps.Keys(s.kinds)) }

// basic is a kind's steps where it has nothing to add.
type basic struct{}

func (basic) desired(sh api.Shard) int32 { return sh.Replicas }

func (basic) paused(*api.Workload, []shardView, *api.Status) (done, final bool) { return false, false }

func (basic) placed(*api.Workload, *api.PlacementDecision, *api.Status) {}

func (basic) left(any) int32 { return 0 }

// partOf returns an observation's part as a T: the zero T when it holds
// none (or another kind's).
func partOf[T any](o observation) T {
	if p, ok := o.Part.(*T); ok && p != nil {
		return *p
	}
	var zero T
	return zero
}

// objectsOf returns the objects of resource r that belong to the
// workload key, in the term's caches.
func (t *clusterTerm) objectsOf(r schema.GroupVersionResource, key string) []any {
	idx := t.indexers[r]
	if idx == nil {
		return nil
	}
	objs, err := idx.ByIndex(byWorkload, key)
	if err != nil {
		return nil
	}
	return objs
}
