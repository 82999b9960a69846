package api

import "time"

// The remediation service's status as it crosses the bus (the reply of
// bus.RemediationStatus): plain data, built by the service from its
// state machine's types and read by the gateway (which maps it to the
// Compute API's RemediationCluster) and by `atoll-admin remediation`.
// The JSON field names and their order are the service's bucket values'
// (remediation.ClusterView, NodeState...), so the wire format is theirs.

// RemediationClusterStatus is one member cluster's remediation status:
// its view (reachable, paused, breakers), the disruption leases on its
// nodes, and every watched node that is not simply healthy, with what is
// being done to it, why, and its history.
type RemediationClusterStatus struct {
	Cluster string `json:"cluster"`
	// Holder is the remediation replica holding the cluster's lease.
	Holder string `json:"holder"`
	// Reachable is false while the member API server does not answer (no
	// action is taken then).
	Reachable bool `json:"reachable"`
	// Paused says why new actions are paused (region or cluster); empty
	// when not paused.
	Paused   string               `json:"paused,omitempty"`
	Breakers []RemediationBreaker `json:"breakers,omitempty"`
	// Time is when the holder last wrote the cluster's view.
	Time   time.Time          `json:"time"`
	Leases []RemediationLease `json:"leases,omitempty"`
	Nodes  []RemediationNode  `json:"nodes,omitempty"`
}

// RemediationBreaker is the storm breaker of one failure domain.
type RemediationBreaker struct {
	// Domain is "pool/<pool>", "cluster/<cluster>" or "zone/<zone>".
	Domain    string `json:"domain"`
	Unhealthy int    `json:"unhealthy"`
	Total     int    `json:"total"`
	// Allowed is how many of Total may be unhealthy before it opens.
	Allowed int  `json:"allowed"`
	Open    bool `json:"open"`
	// OpenedAt is when it last opened; CoolingUntil, while the domain is
	// back within Allowed, when it closes.
	OpenedAt     time.Time `json:"openedAt,omitzero"`
	CoolingUntil time.Time `json:"coolingUntil,omitzero"`
}

// RemediationLease is one disruption lease on a node.
type RemediationLease struct {
	Node    string    `json:"node"`
	Owner   string    `json:"owner"`
	Reason  string    `json:"reason,omitempty"`
	Expires time.Time `json:"expires"`
}

// RemediationNode is what the remediation service knows and does about
// one node.
type RemediationNode struct {
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
	UID     string `json:"uid"`
	Pool    string `json:"pool,omitempty"`
	Zone    string `json:"zone,omitempty"`
	// Phase is Healthy, Unhealthy, Cordoned, Draining, Replacing,
	// Replaced or NeedsHuman (what is being done).
	Phase      string    `json:"phase"`
	PhaseSince time.Time `json:"phaseSince,omitzero"`
	// Signal is the unhealthy condition seen ("Ready=False").
	Signal string `json:"signal,omitempty"`
	// UnhealthySince is when the service first saw the node unhealthy;
	// zero while healthy.
	UnhealthySince time.Time `json:"unhealthySince,omitzero"`
	// Waiting says why nothing happens now (the duration, a gate).
	Waiting string `json:"waiting,omitempty"`
	// Transitions are the health changes within the flap window.
	Transitions []time.Time        `json:"transitions,omitempty"`
	Flapping    bool               `json:"flapping,omitempty"`
	Drain       RemediationDrain   `json:"drain,omitzero"`
	Replace     RemediationReplace `json:"replace,omitzero"`
	History     []RemediationEvent `json:"history,omitempty"`
}

// RemediationEvent is one event of a node's remediation history.
type RemediationEvent struct {
	// Seq numbers the node's events from 1.
	Seq     int       `json:"seq"`
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Message string    `json:"message,omitempty"`
}

// RemediationDrain is a node's drain progress.
type RemediationDrain struct {
	Started  time.Time `json:"started,omitzero"`
	Passes   int       `json:"passes,omitempty"`
	NextPass time.Time `json:"nextPass,omitzero"`
	// Evicted are the pods evicted so far.
	Evicted []RemediationPod `json:"evicted,omitempty"`
	// Blocked are the pods the last pass could not evict.
	Blocked []RemediationBlocked `json:"blocked,omitempty"`
	// Force says the drain deadline passed under the force policy.
	Force bool `json:"force,omitempty"`
}

// RemediationPod names a pod.
type RemediationPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// RemediationBlocked is a pod whose eviction a PodDisruptionBudget
// refused.
type RemediationBlocked struct {
	Pod RemediationPod `json:"pod"`
	// PDB is namespace/name of the budget that blocks it ("" when none
	// matched).
	PDB     string `json:"pdb,omitempty"`
	Message string `json:"message,omitempty"`
}

// RemediationReplace is a node's replacement progress.
type RemediationReplace struct {
	Attempt int       `json:"attempt,omitempty"`
	Name    string    `json:"name,omitempty"`
	Started time.Time `json:"started,omitzero"`
	// Prev is the previous attempt's replacement, which this one replaces.
	Prev string `json:"prev,omitempty"`
	// Done says the provider call for this attempt returned.
	Done bool `json:"done,omitempty"`
}

// RemediationScope is the reply of remediation's pause and resume: the
// scope changed, a member cluster or "region" ({"paused": "zone-a"},
// {"resumed": "region"}).
type RemediationScope struct {
	Paused  string `json:"paused,omitempty"`
	Resumed string `json:"resumed,omitempty"`
}
