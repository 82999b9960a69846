package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	resourcehelper "k8s.io/component-helpers/resource"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// A cluster's inventory and health are kept by the replica holding its
// lease: it probes /readyz every ProbeEvery and computes capacity from its
// informer caches.

func (t *clusterTerm) probeLoop(ctx context.Context) {
	tick := time.NewTicker(ProbeEvery)
	defer tick.Stop()
	for {
		t.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probe checks /readyz and writes the inventory when it changed (and at
// least every few probes, so LastSeen stays fresh).
func (t *clusterTerm) probe(ctx context.Context) {
	c := t.c
	pctx, cancel := context.WithTimeout(ctx, ProbeEvery)
	err := c.cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(pctx).Error()
	cancel()
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	was := t.healthy
	msg := ""
	if err == nil {
		t.lastOK, t.healthy = now, true
	} else if now.Sub(t.lastOK) > Grace {
		t.healthy = false
		msg = fmt.Sprintf("readyz failing for %s: %v", now.Sub(t.lastOK).Round(time.Second), err)
	}
	healthy, lastOK := t.healthy, t.lastOK
	t.mu.Unlock()
	if was != healthy {
		event := "healthy"
		if !healthy {
			event = "unhealthy"
		}
		t.log.Warn("member cluster health changed", "healthy", healthy, "err", err)
		c.s.emit(ctx, bus.ClusterSubject(c.member.Name, event), fmt.Sprintf("%s.%s.%d", c.member.Name, event, now.UnixNano()),
			map[string]any{"cluster": c.member.Name, "event": event, "time": now.UTC(), "message": msg})
	}
	info := api.ClusterInfo{
		Name: c.member.Name, Zone: c.member.Zone, Labels: c.member.Labels,
		Healthy: healthy, Message: msg, LastSeen: lastOK.UTC(),
	}
	if err == nil && t.cachesSynced() {
		info.Pools = t.pools()
	} // else nextInventory keeps the last known capacity: unreachable, or just started
	c.writeInventory(ctx, info, now)
}

func (t *clusterTerm) cachesSynced() bool {
	for _, synced := range t.hasSynced {
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
func (c *cluster) writeInventory(ctx context.Context, info api.ClusterInfo, now time.Time) {
	_, err := bus.Update(ctx, c.s.clusterKV, c.member.Name, func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			cur = nil
		}
		next := nextInventory(info, cur, c.member, now, 5*ProbeEvery)
		if next == nil {
			return nil, bus.ErrNoChange
		}
		return json.Marshal(next)
	})
	if err != nil && !errors.Is(err, bus.ErrNoChange) && !errors.Is(err, context.Canceled) {
		c.log.Warn("write inventory", "err", err)
	}
}

// pools computes capacity per node pool from the node cache and the
// requests the cached pods hold per node (nodeUsage): its cost grows with
// the nodes, not the pods.
func (t *clusterTerm) pools() map[string]api.PoolInfo {
	nodes, err := t.nodes.List(labels.Everything())
	if err != nil {
		return nil
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
		load := t.usage.of(n.Name)
		used := load.Requested
		pi.Allocatable.MilliCPU += alloc.MilliCPU
		pi.Allocatable.MemoryBytes += alloc.MemoryBytes
		pi.Allocatable.GPUs += alloc.GPUs
		pi.Requested.MilliCPU += used.MilliCPU
		pi.Requested.MemoryBytes += used.MemoryBytes
		pi.Requested.GPUs += used.GPUs
		pi.AllocatablePods += a.Pods().Value()
		pi.RequestedPods += load.Pods
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

// podRequests is a pod's effective request as the kube-scheduler counts
// it (native sidecars, init containers and overhead included).
func podRequests(p *corev1.Pod) api.Quantities {
	return api.QuantitiesOf(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))
}
