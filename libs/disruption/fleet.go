package disruption

import (
	corev1 "k8s.io/api/core/v1"
)

// RefOf names node n of cluster for the ledger.
func RefOf(cluster string, n *corev1.Node) NodeRef {
	return NodeRef{Cluster: cluster, Pool: n.Labels[LabelPool], Name: n.Name, UID: string(n.UID)}
}

// FleetOf is the Fleet of a cluster's nodes (from an informer's lister):
// each node's pool, and whether it is NotReady (its first Ready
// condition, as Kubernetes reads it, is not True; a node without one
// counts as NotReady).
func FleetOf(nodes []*corev1.Node) Fleet {
	f := make(Fleet, len(nodes))
	for _, n := range nodes {
		f[string(n.UID)] = FleetNode{Pool: n.Labels[LabelPool], NotReady: !Ready(n)}
	}
	return f
}

// Ready reports whether n's Ready condition is True.
func Ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
