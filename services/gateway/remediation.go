package gateway

// Node remediation in the Compute API (platform admins): the gateway
// holds no remediation state of its own. GET /v1/remediation asks the
// remediation service's status endpoint (which reads its bucket and the
// disruption ledger, so any replica answers for every cluster); pause and
// resume call its pause and resume endpoints with the caller as `by`,
// then answer the status of the scope they changed, so the caller sees
// the pause it made. The service's JSON is decoded straight into the
// computeapi types, whose field names the spec keeps equal to the
// service's (remediation.ClusterStatus); the gateway does not import the
// service (nor its Kubernetes dependencies). Every call goes through the
// gateway's breaker-wrapped requester (call) as the gateway's NATS user,
// which is one of the two callers remediation answers (bus.RemediationStatus).
// Pause and resume are audited on atoll.audit.platform.<verb>
// (middleware.go: auditVerbs).

import (
	"encoding/json"
	"net/http"

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

func (s *Service) remediationOp(w http.ResponseWriter, r *http.Request, ep bus.Call[api.RemediationPauseRequest, map[string]string]) {
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
	view := computeapi.RemediationStatus{Items: []computeapi.RemediationCluster{}}
	if err := json.Unmarshal(out, &view.Items); err != nil {
		writeError(w, r, http.StatusInternalServerError, "Internal", "unreadable remediation status: "+err.Error())
		return
	}
	if view.Items == nil {
		view.Items = []computeapi.RemediationCluster{}
	}
	writeJSON(w, http.StatusOK, view)
}
