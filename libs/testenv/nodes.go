package testenv

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Node labels set on every simulated node.
const (
	LabelZone         = "topology.kubernetes.io/zone"
	LabelRegion       = "topology.kubernetes.io/region"
	LabelInstanceType = "node.kubernetes.io/instance-type"
	LabelPool         = "atoll.dev/pool"
	LabelTier         = "atoll.dev/tier"
	LabelGPUType      = "atoll.dev/gpu-type"
	// ResourceGPU is the extended resource of NVIDIA GPUs.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
)

// NodePool describes a group of identical simulated nodes.
type NodePool struct {
	// Name is the pool's name; nodes are called <pool>-<i>.
	Name string
	// Count is the number of nodes.
	Count int
	// CPU and Memory are each node's capacity, as Kubernetes quantities
	// (default "32" and "128Gi").
	CPU, Memory string
	// Pods is each node's pod capacity (default 110).
	Pods int
	// GPUs is each node's nvidia.com/gpu capacity; GPUType labels it.
	GPUs    int
	GPUType string
	// InstanceType and Tier are written as node labels when set.
	InstanceType string
	Tier         string
	// Labels are extra node labels.
	Labels map[string]string
	// Taints are set on every node of the pool.
	Taints []corev1.Taint
	// Progress, when set, receives a line every progressEvery while
	// AddNodes creates the pool and waits for it to be Ready (a pool of
	// thousands takes minutes).
	Progress io.Writer
}

// nodeCreators is how many node creates AddNodes keeps in flight: the API
// server takes a few hundred a second, so 3,000 nodes take seconds, not
// the minutes one at a time would.
const nodeCreators = 64

// progressEvery is how often AddNodes reports progress (NodePool.Progress).
const progressEvery = 10 * time.Second

// readyTimeout is how long AddNodes waits for count nodes to be Ready:
// KWOK marks them Ready at hundreds a second on an idle machine, but at a
// few a second on a loaded 2-core one.
func readyTimeout(count int) time.Duration {
	return 2*time.Minute + time.Duration(count)*200*time.Millisecond
}

// AddNodes creates the pool's nodes, KWOK-managed, in the cluster's zone,
// waits until KWOK reports all of them Ready, and returns their names.
// Existing nodes of the same name are left as they are.
func (c *Cluster) AddNodes(ctx context.Context, p NodePool) ([]string, error) {
	if p.Name == "" || p.Count <= 0 {
		return nil, fmt.Errorf("node pool needs a name and a positive count, got %q/%d", p.Name, p.Count)
	}
	if p.CPU == "" {
		p.CPU = "32"
	}
	if p.Memory == "" {
		p.Memory = "128Gi"
	}
	if p.Pods == 0 {
		p.Pods = 110
	}
	capacity := corev1.ResourceList{}
	for name, q := range map[corev1.ResourceName]string{
		corev1.ResourceCPU: p.CPU, corev1.ResourceMemory: p.Memory, corev1.ResourcePods: strconv.Itoa(p.Pods),
	} {
		v, err := resource.ParseQuantity(q)
		if err != nil {
			return nil, fmt.Errorf("node pool %s: %s %q: %w", p.Name, name, q, err)
		}
		capacity[name] = v
	}
	if p.GPUs > 0 {
		capacity[ResourceGPU] = *resource.NewQuantity(int64(p.GPUs), resource.DecimalSI)
	}
	names := make([]string, p.Count)
	var created atomic.Int64
	start := time.Now()
	stop := reportEvery(p.Progress, func() string {
		return fmt.Sprintf("cluster %s pool %s: %d of %d nodes created (%v)", c.Name, p.Name, created.Load(), p.Count, time.Since(start).Round(time.Second))
	})
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(nodeCreators)
	for i := range p.Count {
		name := fmt.Sprintf("%s-%s-%d", c.Name, p.Name, i)
		names[i] = name
		g.Go(func() error {
			_, err := c.Client.CoreV1().Nodes().Create(gctx, c.node(name, p, capacity), metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create node %s: %w", name, err)
			}
			created.Add(1)
			return nil
		})
	}
	err := g.Wait()
	stop()
	if err != nil {
		return nil, err
	}
	return names, c.waitNodesReady(ctx, p, start)
}

// reportEvery writes line() to w every progressEvery until the returned
// stop is called; nothing with a nil w.
func reportEvery(w io.Writer, line func() string) (stop func()) {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fmt.Fprintln(w, line())
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (c *Cluster) waitNodesReady(ctx context.Context, p NodePool, start time.Time) error {
	pool, want := p.Name, p.Count
	ctx, cancel := context.WithTimeout(ctx, readyTimeout(want))
	defer cancel()
	var nready atomic.Int64
	stop := reportEvery(p.Progress, func() string {
		return fmt.Sprintf("cluster %s pool %s: %d of %d nodes Ready (%v)", c.Name, pool, nready.Load(), want, time.Since(start).Round(time.Second))
	})
	defer stop()
	// A list of thousands of nodes is work for the API server: polled
	// less often.
	poll := 200 * time.Millisecond
	if want > 500 {
		poll = 2 * time.Second
	}
	for {
		list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelPool + "=" + pool})
		ready := 0
		if err == nil {
			for _, n := range list.Items {
				for _, cond := range n.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if ready >= want {
				return nil
			}
		}
		nready.Store(int64(ready))
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster %s pool %s: %d of %d nodes Ready: %w", c.Name, pool, ready, want, ctx.Err())
		case <-time.After(poll):
		}
	}
}

func (c *Cluster) node(name string, p NodePool, capacity corev1.ResourceList) *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
		LabelZone:                c.Zone,
		LabelPool:                p.Name,
	}
	if p.InstanceType != "" {
		labels[LabelInstanceType] = p.InstanceType
	}
	if p.Tier != "" {
		labels[LabelTier] = p.Tier
	}
	if p.GPUType != "" {
		labels[LabelGPUType] = p.GPUType
	}
	for k, v := range p.Labels {
		labels[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: labels,
			// No status.addresses (kwok #1681, see metrics.go); where
			// metrics-server finds the node's resource metrics.
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0",
				annoMetricsPath: "/metrics/nodes/" + name + "/metrics/resource"},
		},
		Spec: corev1.NodeSpec{Taints: p.Taints},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Phase:       corev1.NodeRunning,
			NodeInfo:    corev1.NodeSystemInfo{KubeletVersion: "kwok", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
}

// BreakNode makes node report Ready=False the way a node whose kubelet is
// down does, while KWOK leaves it alone. KWOK's node-initialize stage sets
// Ready back to True at once on any node whose Ready conditions are all
// other than True, so the status also carries a second, later Ready entry
// that is True: Kubernetes (the node lifecycle controller) and the
// remediation service read the first one, False, and KWOK leaves the node
// alone. KWOK still runs the node's pods, so evictions complete as on a
// live kubelet.
func BreakNode(ctx context.Context, cs kubernetes.Interface, node string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		conds := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "AtollTestKubeletDown", LastHeartbeatTime: now, LastTransitionTime: now}}
		for _, c := range n.Status.Conditions {
			if c.Type != corev1.NodeReady {
				conds = append(conds, c)
			}
		}
		conds = append(conds, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "AtollTestKwokGuard", LastHeartbeatTime: now, LastTransitionTime: now})
		n.Status.Conditions = conds
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}
