package aggregator

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"atoll.dev/libs/api"
)

// nodeUsage is what the pods bound to each node request, kept up to date
// from the pod informer's events, so that the inventory's capacity per
// pool (pools), recomputed every ProbeEvery, costs the cluster's node
// count rather than its pod count: at 30,000 pods a walk of the pod cache
// every probe was the aggregator's one periodic cost that grew with the
// cluster.
//
// A pod counts while it is bound to a node and neither Succeeded nor
// Failed, with its effective requests (podView.Requests), as the
// kube-scheduler counts it. An update takes out what the previous
// version added and adds the new one's; a delete takes out the last
// version the cache held (a tombstone's too).
type nodeUsage struct {
	mu    sync.Mutex
	nodes map[string]nodeLoad // mu must be held
}

// nodeLoad is the pods one node holds.
type nodeLoad struct {
	// Requested is their requests summed.
	Requested api.Quantities
	// Pods is how many there are.
	Pods int64
}

func newNodeUsage() *nodeUsage { return &nodeUsage{nodes: map[string]nodeLoad{}} }

// holding reports the node obj (a *podView or its tombstone) holds
// resources on, if any.
func holding(obj any) (*podView, string, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*podView)
	if !ok {
		return nil, "", false
	}
	node := p.Node.String()
	if node == "" || p.phase() == corev1.PodSucceeded || p.phase() == corev1.PodFailed {
		return nil, "", false
	}
	return p, node, true
}

// apply adds obj's requests to its node's (sign 1) or takes them out
// (sign -1); mu must be held.
func (u *nodeUsage) apply(obj any, sign int64) {
	p, node, ok := holding(obj)
	if !ok {
		return
	}
	l := u.nodes[node]
	l.Requested.MilliCPU += sign * p.Requests.MilliCPU
	l.Requested.MemoryBytes += sign * p.Requests.MemoryBytes
	l.Requested.GPUs += sign * p.Requests.GPUs
	l.Pods += sign
	if l.Pods <= 0 {
		delete(u.nodes, node) // a node's entry goes with its last pod
		return
	}
	u.nodes[node] = l
}

// handler keeps u from the pod informer's events.
func (u *nodeUsage) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.apply(obj, 1)
		},
		UpdateFunc: func(old, obj any) {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.apply(old, -1)
			u.apply(obj, 1)
		},
		DeleteFunc: func(obj any) {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.apply(obj, -1)
		},
	}
}

// of returns the load of node.
func (u *nodeUsage) of(node string) nodeLoad {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.nodes[node]
}
