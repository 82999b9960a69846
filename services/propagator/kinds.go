package propagator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// kind is what a workload kind provides to the propagator: the objects a
// shard of it becomes in a member cluster, how they are written, and which
// are deleted when the shard goes. Each kind's implementation is in its
// file (kind_<name>.go); newKinds lists them. A kind embeds basic for the
// steps it has nothing to add to.
type kind interface {
	// resource is the resource of a shard's main object: the informers
	// watch it, and the shard's key is looked up in it.
	resource() schema.GroupVersionResource
	// render makes a shard's main object, not stamped yet.
	render(d *desired, sh api.Shard) object
	// unhashed adds to a stamped object what changes with time rather
	// than with the shard, which its hash must not see.
	unhashed(o *object, now time.Time)
	// create writes a new main object with the typed client (protobuf on
	// the wire), in the term tt of the cluster's lease.
	create(ctx context.Context, tt *term, cs kubernetes.Interface, ns string, obj any, o metav1.CreateOptions) error
	// prepare runs before a server-side apply of a main object that
	// exists (a restarted Pod is deleted first).
	prepare(ctx context.Context, t *target, o object, ns string) error
	// invalid answers an apply the API server refused as Invalid (err):
	// an object whose immutable fields changed is replaced.
	invalid(ctx context.Context, t *target, o object, ns string, err error) error
	// before writes what the main object needs to exist first (a Pod's
	// claim); beside, what is applied with it (an App's budget).
	before(ctx context.Context, t *target, w *api.Workload, sh api.Shard, ns string) error
	beside(ctx context.Context, t *target, w *api.Workload, sh api.Shard, ns string) error
	// owned lists the objects of the workload name's shard in cluster,
	// the main object first: all are deleted when the shard goes.
	owned(cluster, name string) []owned
	// lead runs beside each term tt of a cluster's lease, until ctx ends
	// (the CronJob's fence).
	lead(ctx context.Context, t *target, tt *term)
}

// owned is one object of a shard, by resource and name.
type owned struct {
	gvr  schema.GroupVersionResource
	name string
}

// newKinds returns the kinds the propagator renders, by name. Adding a
// kind means adding it here (TestKindsTable fails until then).
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

// Kinds lists the kinds the propagator can render, sorted. A shard of any
// other kind is logged as an error and left alone.
func (s *Service) Kinds() []string { return slices.Sorted(maps.Keys(s.kinds)) }

// errUnknownKind says a workload's kind has no renderer.
var errUnknownKind = errors.New("the propagator cannot render kind")

// basic is a kind's steps where it has nothing to add: its main object is
// all there is, applied as it is.
type basic struct{}

func (basic) unhashed(*object, time.Time) {}

func (basic) prepare(context.Context, *target, object, string) error { return nil }

func (basic) invalid(_ context.Context, _ *target, o object, ns string, err error) error {
	return fmt.Errorf("apply %s %s/%s: %w", o.gvr.Resource, ns, o.name, err)
}

func (basic) before(context.Context, *target, *api.Workload, api.Shard, string) error { return nil }

func (basic) beside(context.Context, *target, *api.Workload, api.Shard, string) error { return nil }

func (basic) lead(context.Context, *target, *term) {}

// applyBeside applies obj, an object beside a shard's main object (what
// names its type in errors), with server-side apply.
func (t *target) applyBeside(ctx context.Context, gvr schema.GroupVersionResource, what, ns, name string, obj any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	err = t.call(func() error {
		_, err := t.dyn.Resource(gvr).Namespace(ns).Patch(ctx, name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
		return err
	})
	if err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", what, ns, name, err)
	}
	return nil
}
