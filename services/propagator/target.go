package propagator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/csaupgrade"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
)

// target applies shards to one member cluster.
type target struct {
	s     *Service
	name  string
	dyn   dynamic.Interface
	cs    kubernetes.Interface // protobuf on the wire
	queue *bus.Queue
	log   *slog.Logger

	mu         sync.Mutex
	held       map[string]bool // mu must be held: keys with objects here
	namespaces map[string]bool // mu must be held: namespaces known to exist
}

func newTarget(s *Service, m clusters.Member) (*target, error) {
	cfg, err := m.RESTConfig()
	if err != nil {
		return nil, err
	}
	// A frozen cluster must fail fast: its breaker opens after a few of these.
	cfg.Timeout = 5 * time.Second
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
	}
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
	}
	return &target{
		s: s, name: m.Name, dyn: dyn, cs: cs, queue: bus.NewQueue(), log: s.log.With("cluster", m.Name),
		held: map[string]bool{}, namespaces: map[string]bool{},
	}, nil
}

// isClusterFailure says which errors count against a cluster's breaker:
// not the answers of a working API server about one object.
func isClusterFailure(err error) bool {
	switch {
	case apierrors.IsInvalid(err), apierrors.IsNotFound(err), apierrors.IsConflict(err),
		apierrors.IsAlreadyExists(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err),
		apierrors.IsUnauthorized(err), apierrors.IsGone(err):
		return false
	}
	return true
}

func (t *target) holds(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.held[key]
}

func (t *target) call(fn func() error) error {
	_, err := t.s.breakers.Execute(t.name, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// run learns which workloads already have objects here, then applies.
func (t *target) run(ctx context.Context) {
	go t.discover(ctx)
	t.queue.Run(ctx, WorkersPerCluster, t.log, t.reconcile)
}

// discover lists the platform's objects in the cluster, so shards left by
// an earlier placement are removed even after a restart.
func (t *target) discover(ctx context.Context) {
	for delay := time.Second; ctx.Err() == nil; delay = min(2*delay, 30*time.Second) {
		keys := map[string]bool{}
		err := t.call(func() error {
			for kind, r := range renderers {
				list, err := t.dyn.Resource(r.resource).Namespace("").List(ctx, metav1.ListOptions{
					LabelSelector: api.LabelManaged + "=true," + api.LabelKind + "=" + api.KindLabel(kind),
				})
				if err != nil {
					return err
				}
				for _, o := range list.Items {
					l := o.GetLabels()
					keys[api.Key(l[api.LabelProject], kind, l[api.LabelWorkload])] = true
				}
			}
			return nil
		})
		if err == nil {
			t.mu.Lock()
			for k := range keys {
				t.held[k] = true
			}
			t.mu.Unlock()
			for k := range keys {
				t.s.top.Add(k)
			}
			t.log.Info("discovered existing shards", "count", len(keys))
			return
		}
		t.log.Warn("discover shards", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
}

// reconcile makes this cluster's part of key match the desired state.
func (t *target) reconcile(ctx context.Context, key string) error {
	d, done := t.s.snapshot(key, t.name)
	if done {
		return nil // this placement revision is already applied here
	}
	var sh *api.Shard
	if d != nil {
		sh = d.shard(t.name)
	}
	if sh == nil {
		if !t.holds(key) {
			return nil
		}
		if err := t.remove(ctx, key); err != nil {
			return err
		}
		t.s.forget(key, d)
		return nil
	}
	w := d.workload
	if err := t.ensureNamespace(ctx, w.Metadata.Project); err != nil {
		return err
	}
	r := renderers[w.Kind]
	obj := r.render(w, *sh)
	if err := t.createOrApply(ctx, key, r.create, obj, api.Namespace(w.Metadata.Project)); err != nil {
		return err
	}
	t.mu.Lock()
	t.held[key] = true
	t.mu.Unlock()
	t.s.markApplied(ctx, key, t.name, d)
	return nil
}

// createOrApply creates a shard this cluster does not hold yet (one write,
// cheaper for the API server than a first server-side apply) and applies
// it with server-side apply otherwise, or when it turns out to exist.
func (t *target) createOrApply(ctx context.Context, key string, create createFunc, o object, ns string) error {
	if t.holds(key) {
		return t.apply(ctx, o, ns)
	}
	err := t.call(func() error {
		return create(ctx, t.cs, ns, o.obj, metav1.CreateOptions{FieldManager: FieldManager})
	})
	if apierrors.IsAlreadyExists(err) {
		return t.apply(ctx, o, ns)
	}
	if err != nil {
		return fmt.Errorf("create %s %s/%s: %w", o.gvr.Resource, ns, o.name, err)
	}
	return nil
}

type createFunc func(ctx context.Context, cs kubernetes.Interface, ns string, obj any, o metav1.CreateOptions) error

func (t *target) apply(ctx context.Context, o object, ns string) error {
	if o.gvr == pods {
		if err := t.replaceRestartedPod(ctx, o, ns); err != nil {
			return err
		}
	}
	body, err := json.Marshal(o.obj)
	if err != nil {
		return err
	}
	ssa := func() (*unstructured.Unstructured, error) {
		var out *unstructured.Unstructured
		err := t.call(func() error {
			var err error
			out, err = t.dyn.Resource(o.gvr).Namespace(ns).Patch(ctx, o.name, types.ApplyPatchType, body,
				metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
			return err
		})
		return out, err
	}
	out, err := ssa()
	if apierrors.IsInvalid(err) && o.gvr == jobs {
		// A Job's template is immutable: replace the shard.
		t.log.Info("replacing immutable job", "namespace", ns, "name", o.name)
		if derr := t.delete(ctx, o.gvr, ns, o.name); derr != nil {
			return derr
		}
		return fmt.Errorf("apply %s/%s: replaced immutable job, re-applying: %w", ns, o.name, err)
	}
	if err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", o.gvr.Resource, ns, o.name, err)
	}
	// An object this service created (an Update operation) still has fields
	// owned by that operation, which an apply would never remove. Hand them
	// to the apply manager once, then apply again so removals take effect.
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(out, sets.New(FieldManager), FieldManager)
	if err != nil || patch == nil {
		return err
	}
	if err := t.call(func() error {
		_, err := t.dyn.Resource(o.gvr).Namespace(ns).Patch(ctx, o.name, types.JSONPatchType, patch, metav1.PatchOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("upgrade managed fields of %s/%s: %w", ns, o.name, err)
	}
	if _, err := ssa(); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", o.gvr.Resource, ns, o.name, err)
	}
	return nil
}

// errReplacing says a Pod is being replaced; the key is retried until the
// old Pod is gone and the new one can be created.
var errReplacing = errors.New("replacing the pod")

// replaceRestartedPod deletes the live Pod when its restart annotations
// differ from o's: a Pod's containers cannot be restarted in place, so a
// restart replaces the Pod. While the old Pod goes it returns an error
// wrapping errReplacing, so the key is retried and the Pod created anew.
func (t *target) replaceRestartedPod(ctx context.Context, o object, ns string) error {
	var live *corev1.Pod
	err := t.call(func() error {
		p, err := t.cs.CoreV1().Pods(ns).Get(ctx, o.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		live = p
		return err
	})
	if err != nil {
		return fmt.Errorf("read pod %s/%s: %w", ns, o.name, err)
	}
	if live == nil {
		return nil
	}
	if live.DeletionTimestamp != nil {
		return fmt.Errorf("pod %s/%s is terminating: %w", ns, o.name, errReplacing)
	}
	want := o.obj.(*corev1.Pod).Annotations
	if maps.Equal(restartAnnotations(live.Annotations), restartAnnotations(want)) {
		return nil
	}
	t.log.Info("restarting pod", "namespace", ns, "name", o.name)
	if err := t.delete(ctx, pods, ns, o.name); err != nil {
		return err
	}
	return fmt.Errorf("pod %s/%s deleted for a restart: %w", ns, o.name, errReplacing)
}

// restartAnnotations picks the annotations that carry restarts.
func restartAnnotations(a map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		if k == api.AnnoRestartedAt || strings.HasPrefix(k, api.AnnoRestartPrefix) {
			out[k] = v
		}
	}
	return out
}

func (t *target) remove(ctx context.Context, key string) error {
	project, kind, name, err := api.ParseKey(key)
	if err != nil {
		return nil
	}
	if err := t.delete(ctx, renderers[kind].resource, api.Namespace(project), name); err != nil {
		return err
	}
	t.mu.Lock()
	delete(t.held, key)
	t.mu.Unlock()
	return nil
}

func (t *target) delete(ctx context.Context, r schema.GroupVersionResource, ns, name string) error {
	err := t.call(func() error {
		err := t.dyn.Resource(r).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete %s %s/%s: %w", r.Resource, ns, name, err)
	}
	return nil
}

func (t *target) ensureNamespace(ctx context.Context, project string) error {
	ns := api.Namespace(project)
	t.mu.Lock()
	known := t.namespaces[ns]
	t.mu.Unlock()
	if known {
		return nil
	}
	body, _ := json.Marshal(&corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{api.LabelManaged: "true", api.LabelProject: project}},
	})
	err := t.call(func() error {
		_, err := t.dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Patch(ctx, ns, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
		return err
	})
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	t.mu.Lock()
	t.namespaces[ns] = true
	t.mu.Unlock()
	return nil
}
