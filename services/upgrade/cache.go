package upgrade

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"atoll.dev/libs/clusters"
)

// The member clusters' nodes and Pending pods, as the service reads them
// every tick. Each replica keeps, per member cluster, an informer on its
// nodes (slimmed: clusters.SlimNode) and one on its Pending pods only
// (the API server filters them: a pod that starts leaves the cache), so a
// tick reads memory instead of listing a cluster of thousands of nodes;
// what a tick costs the API server is one probe (reachable), not a list
// that grows with the cluster. The caches lag the API server by a watch
// event; every action a tick takes is idempotent given the progress it
// stored first, so a decision made on a view a moment old is made again
// on the next tick if it did not hold.

// memberCaches are a member cluster's informers.
type memberCaches struct {
	nodes, pending cache.SharedIndexInformer
}

// newMemberCaches makes m's informers on cfg and conn's transport, with
// no client timeout (a watch must not be cut every few seconds, and the
// first list of a large cluster may take longer than a request).
func newMemberCaches(cfg *rest.Config, conn *clusters.Conn) (*memberCaches, error) {
	wcfg := rest.CopyConfig(cfg)
	wcfg.Timeout = 0
	cs, err := kubernetes.NewForConfigAndClient(wcfg, &http.Client{Transport: conn.HTTP.Transport})
	if err != nil {
		return nil, err
	}
	nodes := informers.NewSharedInformerFactory(cs, 0).Core().V1().Nodes().Informer()
	if err := nodes.SetTransform(clusters.SlimNode); err != nil {
		return nil, err
	}
	pending := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "status.phase=" + string(corev1.PodPending)
	})).Core().V1().Pods().Informer()
	if err := pending.SetTransform(slimPending); err != nil {
		return nil, err
	}
	return &memberCaches{nodes: nodes, pending: pending}, nil
}

// slimPending keeps of a Pending pod what the gate reads: its name and
// when it was made.
func slimPending(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID,
		ResourceVersion: p.ResourceVersion, CreationTimestamp: p.CreationTimestamp}}, nil
}

// run runs the informers in wg until ctx ends.
func (c *memberCaches) run(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { c.pending.RunWithContext(ctx) })
	wg.Go(func() { c.nodes.RunWithContext(ctx) })
}

// synced reports whether both informers have listed the cluster.
func (c *memberCaches) synced() bool { return c.nodes.HasSynced() && c.pending.HasSynced() }

// hasNode reports whether the cache holds a node called name (a
// replacement made on an earlier tick). A cache that lags says no, and
// the caller makes it again (AlreadyExists).
func (c *memberCaches) hasNode(name string) bool {
	_, ok, err := c.nodes.GetStore().GetByKey(name)
	return err == nil && ok
}

// waitSynced waits until every member's caches are synced, at most
// within; it reports whether they are.
func (s *Service) waitSynced(ctx context.Context, within time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var synced []cache.InformerSynced
	for _, m := range s.clusters {
		synced = append(synced, m.caches.synced)
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

// nodes returns m's nodes by UID, from its cache. The objects are the
// cache's: never modified.
func (s *Service) nodes(_ context.Context, m *member) (map[string]*corev1.Node, error) {
	if !m.caches.nodes.HasSynced() {
		return nil, fmt.Errorf("nodes of %s not listed yet", m.name)
	}
	objs := m.caches.nodes.GetStore().List()
	out := make(map[string]*corev1.Node, len(objs))
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			out[string(n.UID)] = n
		}
	}
	return out, nil
}

// pendingList returns m's Pending pods, from its cache.
func (s *Service) pendingList(m *member) ([]*corev1.Pod, error) {
	if !m.caches.pending.HasSynced() {
		return nil, fmt.Errorf("pending pods of %s not listed yet", m.name)
	}
	objs := m.caches.pending.GetStore().List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// pendingPods returns when each Pending pod of m was made, from its cache.
func (s *Service) pendingPods(_ context.Context, m *member) ([]time.Time, error) {
	pods, err := s.pendingList(m)
	if err != nil {
		return nil, err
	}
	out := make([]time.Time, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.CreationTimestamp.Time)
	}
	return out, nil
}

// reachable asks m's API server whether it is ready: the gate never reads
// a cache of a cluster that does not answer as healthy.
func (s *Service) reachable(ctx context.Context, m *member) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
		return fmt.Errorf("cluster %s: %w", m.name, err)
	}
	return nil
}
