// Package disruption is what the services that take nodes out of service
// (remediation, upgrade) share: the disruption ledger, the disruption
// budget and its rounding rule, a drain through the Eviction API, and the
// node-provider interface that replaces a node.
//
// # The ledger
//
// The ledger lives in the Key-Value bucket bus.BucketDisruption, one key
// per member cluster (d.<cluster>). Its value holds a lease per node being
// disrupted, keyed by the node's UID (a node deleted and recreated under
// the same name is another node): the owner (a service name, "remediation"
// or "upgrade", not a replica, so a standby replica resumes its service's
// work on the node), why, and an expiry. Acquire decides two things in one
// compare-and-set (bus.Update): that no other owner holds an unexpired
// lease on the node, and that the budget still allows one more disrupted
// node in the node's pool and in the cluster. Keeping a cluster's leases in
// one key is what makes the budget exact under concurrent writers, as the
// quota service's per-project ledger does; the value stays small because
// it holds only the nodes being disrupted right now, which the budget
// itself bounds.
//
// Typical use by a service (remediation, upgrade):
//
//	l, _ := disruption.OpenLedger(ctx, b)
//	nodes, _ := lister.List(labels.Everything()) // the cluster's nodes, from an informer
//	_, err := l.Acquire(ctx, disruption.Request{
//		Node: disruption.RefOf(cluster, node), Owner: "upgrade", Reason: "rotate to v1.36",
//		TTL: 10 * time.Minute, Budget: disruption.Budget{Pool: "1", Cluster: "20%"},
//		Fleet: disruption.FleetOf(nodes),
//	})
//	switch {
//	case errors.Is(err, disruption.ErrHeld):   // another service works on the node
//	case errors.Is(err, disruption.ErrBudget): // wait: too many nodes out already
//	}
//	... l.Renew while working; l.Release when done.
//
// # The budget
//
// A Budget bounds how many nodes of a pool and of a cluster may be
// unavailable at once: nodes under any owner's lease plus nodes already
// NotReady, each counted once (by UID). A node that is NotReady itself
// (remediation's case) is checked against the leased nodes only: acting
// on it makes nothing less available, and counting the other broken
// nodes would have two broken nodes of a pool wait for each other
// forever. A Limit is a count ("2") or a
// percentage ("25%") of the domain's nodes; percentages round DOWN and
// never below one, so a small pool can still have one node worked on at a
// time, and a pool of one node can have that node worked on (a caller
// that must never drain a pool's only node checks that itself, e.g. by
// surging first). An empty Limit leaves that domain unbounded.
//
// # Drains and providers
//
// Drain runs one pass of a drain through the Eviction API (the caller
// owns retries, backoff and the deadline, so a pass is resumable by a
// standby): DaemonSet and mirror pods are skipped, a pod already
// terminating is not evicted again, and a 429 names the
// PodDisruptionBudget that blocks it. Provider replaces a node; KWOK is
// the test clusters' provider (a new node in the same pool with a new
// name, the old one deleted).
package disruption
