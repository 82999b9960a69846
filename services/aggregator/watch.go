package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
)

// watch follows one member cluster.
type watch struct {
	s      *Service
	member clusters.Member
	cs     kubernetes.Interface
	log    *slog.Logger

	factory     informers.SharedInformerFactory
	deployments appslisters.DeploymentLister
	jobs        batchlisters.JobLister
	pods        corelisters.PodLister
	podIndex    cache.Indexer // pods by workload key (byWorkload)
	nodes       corelisters.NodeLister
	synced      []cache.InformerSynced

	mu      sync.Mutex
	lastOK  time.Time // mu must be held
	healthy bool      // mu must be held
}

func newWatch(s *Service, m clusters.Member) (*watch, error) {
	cfg, err := m.RESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	w := &watch{
		s: s, member: m, cs: cs, log: s.log.With("cluster", m.Name), factory: f,
		deployments: f.Apps().V1().Deployments().Lister(),
		jobs:        f.Batch().V1().Jobs().Lister(),
		pods:        f.Core().V1().Pods().Lister(),
		nodes:       f.Core().V1().Nodes().Lister(),
		healthy:     true,
	}
	onChange := cache.ResourceEventHandlerFuncs{
		AddFunc:    w.enqueueObject,
		UpdateFunc: func(_, o any) { w.enqueueObject(o) },
		DeleteFunc: w.enqueueObject,
	}
	podInf := f.Core().V1().Pods().Informer()
	// A status fold looks up a workload's pods by key: a label-selector
	// list would match every pod of the namespace, per fold.
	if err := podInf.AddIndexers(cache.Indexers{byWorkload: indexByWorkload}); err != nil {
		return nil, fmt.Errorf("cluster %s: pod index: %w", m.Name, err)
	}
	w.podIndex = podInf.GetIndexer()
	for _, inf := range []cache.SharedIndexInformer{
		f.Apps().V1().Deployments().Informer(), f.Batch().V1().Jobs().Informer(), podInf,
	} {
		if _, err := inf.AddEventHandler(onChange); err != nil {
			return nil, err
		}
		w.synced = append(w.synced, inf.HasSynced)
	}
	w.synced = append(w.synced, f.Core().V1().Nodes().Informer().HasSynced)
	ev := f.Core().V1().Events().Informer()
	if _, err := ev.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.onEvent,
		UpdateFunc: func(_, o any) { w.onEvent(o) },
	}); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *watch) run(ctx context.Context) {
	w.mu.Lock()
	w.lastOK = time.Now()
	w.mu.Unlock()
	w.factory.Start(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), w.synced...) {
			w.log.Info("member cluster caches synced")
		}
	}()
	t := time.NewTicker(ProbeEvery)
	defer t.Stop()
	for {
		w.probe(ctx)
		select {
		case <-ctx.Done():
			w.factory.Shutdown()
			return
		case <-t.C:
		}
	}
}

func workloadKey(l map[string]string) (string, bool) {
	if l[api.LabelManaged] != "true" {
		return "", false
	}
	p, k, n := l[api.LabelProject], l[api.LabelKind], l[api.LabelWorkload]
	if p == "" || k == "" || n == "" {
		return "", false
	}
	return p + "." + k + "." + n, true
}

// byWorkload indexes the platform's pods by workload key.
const byWorkload = "atoll-workload"

func indexByWorkload(o any) ([]string, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if key, ok := workloadKey(p.Labels); ok {
		return []string{key}, nil
	}
	return nil, nil
}

// workloadPods returns the pods of the workload key in this cluster.
func (w *watch) workloadPods(key string) []*corev1.Pod {
	objs, err := w.podIndex.ByIndex(byWorkload, key)
	if err != nil {
		return nil
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

func (w *watch) enqueueObject(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	var l map[string]string
	switch v := o.(type) {
	case *appsv1.Deployment:
		l = v.Labels
	case *batchv1.Job:
		l = v.Labels
	case *corev1.Pod:
		l = v.Labels
	}
	if key, ok := workloadKey(l); ok {
		w.s.queue.Add(key)
	}
}

// onEvent attributes a Kubernetes event to the workload its object belongs to.
func (w *watch) onEvent(o any) {
	e, ok := o.(*corev1.Event)
	if !ok || !strings.HasPrefix(e.Namespace, "atoll-") {
		return
	}
	ref := e.InvolvedObject
	var l map[string]string
	switch ref.Kind {
	case "Pod":
		if p, err := w.pods.Pods(ref.Namespace).Get(ref.Name); err == nil {
			l = p.Labels
		}
	case "Deployment":
		if d, err := w.deployments.Deployments(ref.Namespace).Get(ref.Name); err == nil {
			l = d.Labels
		}
	case "Job":
		if j, err := w.jobs.Jobs(ref.Namespace).Get(ref.Name); err == nil {
			l = j.Labels
		}
	}
	key, ok := workloadKey(l)
	if !ok {
		return
	}
	at := e.LastTimestamp.Time
	if at.IsZero() {
		at = e.EventTime.Time
	}
	if at.IsZero() {
		at = e.CreationTimestamp.Time
	}
	w.s.recordEvent(key, api.Event{
		Cluster: w.member.Name, Object: strings.ToLower(ref.Kind) + "/" + ref.Name,
		Type: e.Type, Reason: e.Reason, Message: e.Message, Time: at.UTC(),
	})
}

// isHealthy reports the cluster's health as last probed.
func (w *watch) isHealthy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.healthy
}

// probe checks /readyz and writes the inventory when it changed (and at
// least every few probes, so LastSeen stays fresh).
func (w *watch) probe(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, ProbeEvery)
	err := w.cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(pctx).Error()
	cancel()
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	was := w.healthy
	msg := ""
	if err == nil {
		w.lastOK, w.healthy = now, true
	} else if now.Sub(w.lastOK) > Grace {
		w.healthy = false
		msg = fmt.Sprintf("readyz failing for %s: %v", now.Sub(w.lastOK).Round(time.Second), err)
	}
	healthy, lastOK := w.healthy, w.lastOK
	w.mu.Unlock()
	if was != healthy {
		event := "healthy"
		if !healthy {
			event = "unhealthy"
		}
		w.log.Warn("member cluster health changed", "healthy", healthy, "err", err)
		w.s.emit(ctx, bus.ClusterSubject(w.member.Name, event), fmt.Sprintf("%s.%s.%d", w.member.Name, event, now.UnixNano()),
			map[string]any{"cluster": w.member.Name, "event": event, "time": now.UTC(), "message": msg})
	}
	info := api.ClusterInfo{
		Name: w.member.Name, Zone: w.member.Zone, Labels: w.member.Labels,
		Healthy: healthy, Message: msg, LastSeen: lastOK.UTC(),
	}
	if err == nil && w.cachesSynced() {
		info.Pools = w.pools()
	} // else nextInventory keeps the last known capacity: unreachable, or just started
	w.writeInventory(ctx, info, now)
}

func (w *watch) cachesSynced() bool {
	for _, synced := range w.synced {
		if !synced() {
			return false
		}
	}
	return true
}

// writeInventory writes the cluster's inventory with compare-and-set,
// carrying over what the stored record holds that a probe does not know
// (nextInventory), when it changed or at least every few probes, so
// LastSeen stays fresh.
func (w *watch) writeInventory(ctx context.Context, info api.ClusterInfo, now time.Time) {
	_, err := bus.Update(ctx, w.s.clusterKV, w.member.Name, func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			cur = nil
		}
		next := nextInventory(info, cur, w.member, now, 5*ProbeEvery)
		if next == nil {
			return nil, bus.ErrNoChange
		}
		return json.Marshal(next)
	})
	if err != nil && !errors.Is(err, bus.ErrNoChange) && !errors.Is(err, context.Canceled) {
		w.log.Warn("write inventory", "err", err)
	}
}

// pools computes capacity per node pool from the informer caches.
func (w *watch) pools() map[string]api.PoolInfo {
	nodes, err := w.nodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	pods, _ := w.pods.List(labels.Everything())
	perNode := map[string]api.Quantities{}
	podsOn := map[string]int64{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		q := perNode[p.Spec.NodeName]
		r := podRequests(p)
		q.MilliCPU += r.MilliCPU
		q.MemoryBytes += r.MemoryBytes
		q.GPUs += r.GPUs
		perNode[p.Spec.NodeName] = q
		podsOn[p.Spec.NodeName]++
	}
	out := map[string]api.PoolInfo{}
	for _, n := range nodes {
		name := n.Labels[api.NodeLabelPool]
		if name == "" {
			name = "default"
		}
		pi := out[name]
		pi.Nodes++
		pi.Tier = n.Labels[api.NodeLabelTier]
		if g := n.Labels[api.NodeLabelGPU]; g != "" {
			pi.GPUType = g
		}
		if !nodeReady(n) || n.Spec.Unschedulable {
			out[name] = pi
			continue
		}
		pi.ReadyNodes++
		a := n.Status.Allocatable
		alloc := api.Quantities{
			MilliCPU: a.Cpu().MilliValue(), MemoryBytes: a.Memory().Value(), GPUs: quantity(a, api.ResourceGPUName),
		}
		used := perNode[n.Name]
		pi.Allocatable.MilliCPU += alloc.MilliCPU
		pi.Allocatable.MemoryBytes += alloc.MemoryBytes
		pi.Allocatable.GPUs += alloc.GPUs
		pi.Requested.MilliCPU += used.MilliCPU
		pi.Requested.MemoryBytes += used.MemoryBytes
		pi.Requested.GPUs += used.GPUs
		pi.AllocatablePods += a.Pods().Value()
		pi.RequestedPods += podsOn[n.Name]
		pi.MaxNodeFree.MilliCPU = max(pi.MaxNodeFree.MilliCPU, alloc.MilliCPU-used.MilliCPU)
		pi.MaxNodeFree.MemoryBytes = max(pi.MaxNodeFree.MemoryBytes, alloc.MemoryBytes-used.MemoryBytes)
		pi.MaxNodeFree.GPUs = max(pi.MaxNodeFree.GPUs, alloc.GPUs-used.GPUs)
		out[name] = pi
	}
	return out
}

func quantity(l corev1.ResourceList, name string) int64 {
	q, ok := l[corev1.ResourceName(name)]
	if !ok {
		return 0
	}
	return q.Value()
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podRequests is a pod's effective request: its containers and native
// sidecars, or its largest init container if that is more.
func podRequests(p *corev1.Pod) api.Quantities {
	var sum, initMax api.Quantities
	add := func(dst *api.Quantities, r corev1.ResourceList) {
		dst.MilliCPU += r.Cpu().MilliValue()
		dst.MemoryBytes += r.Memory().Value()
		dst.GPUs += quantity(r, api.ResourceGPUName)
	}
	for _, c := range p.Spec.Containers {
		add(&sum, c.Resources.Requests)
	}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(&sum, c.Resources.Requests)
			continue
		}
		var one api.Quantities
		add(&one, c.Resources.Requests)
		initMax.MilliCPU = max(initMax.MilliCPU, one.MilliCPU)
		initMax.MemoryBytes = max(initMax.MemoryBytes, one.MemoryBytes)
		initMax.GPUs = max(initMax.GPUs, one.GPUs)
	}
	return api.Quantities{
		MilliCPU: max(sum.MilliCPU, initMax.MilliCPU), MemoryBytes: max(sum.MemoryBytes, initMax.MemoryBytes), GPUs: max(sum.GPUs, initMax.GPUs),
	}
}
