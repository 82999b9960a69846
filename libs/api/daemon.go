package api

// KindDaemon is an infrastructure daemon run by platform admins (admission
// refuses it to tenants: Kind.AdminOnly): a DaemonSet in EVERY member
// cluster that passes its placement (clusterSelector, zones, health,
// taints), on the nodes its nodeSelector and tolerations select. A cluster
// that joins later, or starts to match, gets its DaemonSet when the
// scheduler re-decides (it does so on every change of a cluster's
// schedulability). Its status sums the clusters' DaemonSet counters
// (desired, current, ready, updated) and names the clusters behind.
const KindDaemon = "Daemon"

// DaemonSpec is a Daemon. Its pods are one per selected node, so it asks
// for no count; its quota demand is nothing (platform work).
type DaemonSpec struct {
	Common
	// MaxUnavailable is how many nodes' pods a rolling update takes down
	// at once in each cluster (default 1).
	MaxUnavailable int32 `json:"maxUnavailable,omitempty"`
}

// Default implements Spec.
func (s *DaemonSpec) Default() {
	s.defaults()
	if s.MaxUnavailable == 0 {
		s.MaxUnavailable = 1
	}
}

// Validate implements Spec.
func (s *DaemonSpec) Validate() FieldErrors {
	var fe FieldErrors
	s.validate(&fe)
	if s.MaxUnavailable < 0 || s.MaxUnavailable > MaxReplicas {
		fe.add("spec.maxUnavailable", CodeInvalid, "%d is not between 1 and %d", s.MaxUnavailable, MaxReplicas)
	}
	return fe
}

// Pods implements Spec: a Daemon's pods follow the nodes, not a count;
// it reserves nothing against quota and every shard says 0.
func (s *DaemonSpec) Pods() int32 { return 0 }

// DaemonStatus sums a Daemon's DaemonSets.
type DaemonStatus struct {
	DaemonCounts
	// Clusters has each cluster's counts.
	Clusters map[string]DaemonCounts `json:"clusters,omitempty"`
	// Behind names the clusters whose DaemonSet is not yet done: not
	// observed at the latest generation, or fewer pods updated or ready
	// than desired, or not reachable; sorted.
	Behind []string `json:"behind,omitempty"`
}

// DaemonCounts are a DaemonSet's counters.
type DaemonCounts struct {
	// Desired is how many nodes should run the pod; Current how many do;
	// Ready how many of those are ready; Updated how many run the latest
	// template.
	Desired int32 `json:"desired"`
	Current int32 `json:"current"`
	Ready   int32 `json:"ready"`
	Updated int32 `json:"updated"`
}
