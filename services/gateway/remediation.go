package gateway

// Node remediation in the Compute API (platform admins): the gateway
// holds no remediation state of its own. GET /v1/remediation asks the
// remediation service's status endpoint (which reads its bucket and the
// disruption ledger, so any replica answers for every cluster); pause and
// resume call its pause and resume endpoints with the caller as `by`,
// then answer the status of the scope they changed, so the caller sees
// the pause it made. The service answers libs/api's
// RemediationClusterStatus, which remediationCluster maps to the Compute
// API's RemediationCluster field by field; the gateway does not import the
// service (nor its Kubernetes dependencies). Every call goes through the
// gateway's breaker-wrapped requester (call) as the gateway's NATS user,
// which is one of the two callers remediation answers (bus.RemediationStatus).
// Pause and resume are audited on atoll.audit.platform.<verb>
// (middleware.go: auditVerbs).

import (
	"net/http"
	"slices"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
)

// GetRemediation answers the remediation status of one cluster or every
// cluster (platform admins).
func (s *Service) GetRemediation(w http.ResponseWriter, r *http.Request, params computeapi.GetRemediationParams) {
	if !platformAdmin(w, r) {
		return
	}
	s.writeRemediation(w, r, params.Cluster)
}

// PauseRemediation stops new actions in a cluster or the region
// (platform admins).
func (s *Service) PauseRemediation(w http.ResponseWriter, r *http.Request) {
	s.remediationOp(w, r, bus.RemediationPause)
}

// ResumeRemediation lifts a pause (platform admins).
func (s *Service) ResumeRemediation(w http.ResponseWriter, r *http.Request) {
	s.remediationOp(w, r, bus.RemediationResume)
}

func (s *Service) remediationOp(w http.ResponseWriter, r *http.Request, ep bus.Call[api.RemediationPauseRequest, api.RemediationScope]) {
	var p computeapi.RemediationPause
	if !platformAdmin(w, r) || !decodeBody(w, r, &p) {
		return
	}
	req := api.RemediationPauseRequest{Cluster: p.Cluster, By: identity(r).Subject}
	if ep.Verb == bus.RemediationPause.Verb {
		req.Reason = p.Reason
	}
	if err := send(s, r, ep, req); err != nil {
		writeRemoteError(w, r, err)
		return
	}
	s.writeRemediation(w, r, p.Cluster)
}

// writeRemediation answers remediation's status of cluster ("" every
// cluster).
func (s *Service) writeRemediation(w http.ResponseWriter, r *http.Request, cluster string) {
	out, err := call(s, r, bus.RemediationStatus, api.RemediationStatusRequest{Cluster: cluster})
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	view := computeapi.RemediationStatus{Items: make([]computeapi.RemediationCluster, 0, len(out))}
	for _, c := range out {
		view.Items = append(view.Items, remediationCluster(c))
	}
	writeJSON(w, http.StatusOK, view)
}

// remediationCluster is one cluster's remediation status in the Compute
// API (which leaves out each node's flap transitions).
func remediationCluster(c api.RemediationClusterStatus) computeapi.RemediationCluster {
	out := computeapi.RemediationCluster{
		Cluster: c.Cluster, Holder: c.Holder, Reachable: c.Reachable, Paused: c.Paused, Time: c.Time,
	}
	for _, b := range c.Breakers {
		out.Breakers = append(out.Breakers, computeapi.RemediationBreaker{
			Domain: b.Domain, Unhealthy: b.Unhealthy, Total: b.Total, Allowed: b.Allowed, Open: b.Open,
			OpenedAt: b.OpenedAt, CoolingUntil: b.CoolingUntil,
		})
	}
	for _, l := range c.Leases {
		out.Leases = append(out.Leases, computeapi.RemediationLease{Node: l.Node, Owner: l.Owner, Reason: l.Reason, Expires: l.Expires})
	}
	for _, n := range c.Nodes {
		out.Nodes = append(out.Nodes, remediationNode(n))
	}
	return out
}

// remediationNode is one node's remediation state in the Compute API.
func remediationNode(n api.RemediationNode) computeapi.RemediationNode {
	out := computeapi.RemediationNode{
		Cluster: n.Cluster, Node: n.Node, Uid: n.UID, Pool: n.Pool, Zone: n.Zone,
		Phase: n.Phase, PhaseSince: n.PhaseSince, Signal: n.Signal, UnhealthySince: n.UnhealthySince,
		Waiting: n.Waiting, Flapping: n.Flapping,
		Drain: computeapi.RemediationDrain{
			Started: n.Drain.Started, Passes: n.Drain.Passes, NextPass: n.Drain.NextPass, Force: n.Drain.Force,
		},
		Replace: computeapi.RemediationReplace{
			Attempt: n.Replace.Attempt, Name: n.Replace.Name, Started: n.Replace.Started, Prev: n.Replace.Prev, Done: n.Replace.Done,
		},
	}
	for _, p := range n.Drain.Evicted {
		out.Drain.Evicted = append(out.Drain.Evicted, remediationPod(p))
	}
	// The spec's blocked pod has no named type: grow the slice, then fill
	// its elements.
	out.Drain.Blocked = slices.Grow(out.Drain.Blocked, len(n.Drain.Blocked))[:len(n.Drain.Blocked)]
	for i, b := range n.Drain.Blocked {
		o := &out.Drain.Blocked[i]
		o.Pod, o.Pdb, o.Message = remediationPod(b.Pod), b.PDB, b.Message
	}
	for _, e := range n.History {
		out.History = append(out.History, computeapi.RemediationEvent{Seq: e.Seq, Time: e.Time, Event: e.Event, Message: e.Message})
	}
	return out
}

// remediationPod is a pod in the Compute API.
func remediationPod(p api.RemediationPod) computeapi.RemediationPod {
	return computeapi.RemediationPod{Namespace: p.Namespace, Name: p.Name, Uid: p.UID}
}
