package gateway

import (
	"net/http"
	"strings"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
)

// Quota requests: a project's admins ask, platform admins decide. The
// quota service stores them and applies an approval (services/quota
// requests.go); the gateway authorizes and audits (request-quota,
// approve-quota, reject-quota on the project's audit subjects:
// middleware.go auditVerbs).

// CreateQuotaRequest asks for a tier's limits to change (the project's admins).
func (s *Service) CreateQuotaRequest(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath) {
	if !allow(w, r, project, auth.RoleAdmin, false) {
		return
	}
	var body computeapi.QuotaRequestCreate
	if !decodeBody(w, r, &body) {
		return
	}
	req := api.QuotaRequestCreate{Project: project, Tier: body.Tier, CPU: body.Cpu, Memory: body.Memory, Storage: body.Storage,
		GPUs: body.Gpus, Pods: body.Pods, Reason: body.Reason, Requester: identity(r).Subject}
	if _, fe := req.Limit(); len(fe) > 0 {
		writeErrorBody(w, r, http.StatusUnprocessableEntity, apiError(api.ErrorBody{Code: "Invalid", Message: "invalid quota request: " + fieldList(fe), Fields: fe}))
		return
	}
	qr, err := call(s, r, bus.QuotaRequestCreate, req)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, quotaRequestView(qr))
}

// ListProjectQuotaRequests lists a project's requests (viewers and up).
func (s *Service) ListProjectQuotaRequests(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath, params computeapi.ListProjectQuotaRequestsParams) {
	if !allow(w, r, project, auth.RoleViewer, false) {
		return
	}
	s.listQuotaRequests(w, r, api.QuotaRequestList{Project: project, State: api.QuotaRequestState(params.State)})
}

// ListQuotaRequests lists every project's requests (platform admins).
func (s *Service) ListQuotaRequests(w http.ResponseWriter, r *http.Request, params computeapi.ListQuotaRequestsParams) {
	if !platformAdmin(w, r) {
		return
	}
	s.listQuotaRequests(w, r, api.QuotaRequestList{State: api.QuotaRequestState(params.State)})
}

func (s *Service) listQuotaRequests(w http.ResponseWriter, r *http.Request, l api.QuotaRequestList) {
	items, err := call(s, r, bus.QuotaRequestList, l)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	out := computeapi.QuotaRequestList{Items: make([]computeapi.QuotaRequest, 0, len(items.Items))}
	for i := range items.Items {
		out.Items = append(out.Items, quotaRequestView(&items.Items[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// DecideQuotaRequest approves or rejects a request (platform admins).
func (s *Service) DecideQuotaRequest(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath, request, decision string) {
	if !platformAdmin(w, r) {
		return
	}
	if decision != "approve" && decision != "reject" {
		writeError(w, r, http.StatusNotFound, "NotFound", "no such path: "+r.URL.Path)
		return
	}
	if p, _, err := api.ParseQuotaRequestID(request); err != nil || p != project {
		writeError(w, r, http.StatusNotFound, "NotFound", "no quota request "+request+" in project "+project)
		return
	}
	var body computeapi.QuotaDecision
	if r.ContentLength != 0 && !decodeBody(w, r, &body) {
		return
	}
	qr, err := call(s, r, bus.QuotaRequestDecide, api.QuotaRequestDecide{ID: request, Approve: decision == "approve", Reviewer: identity(r).Subject, Reason: body.Reason})
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, quotaRequestView(qr))
}

// fieldList writes field problems as "field: reason; ...".
func fieldList(fe api.FieldErrors) string {
	parts := make([]string, len(fe))
	for i, f := range fe {
		parts[i] = f.Field + ": " + f.Reason
	}
	return strings.Join(parts, "; ")
}

func quotaRequestView(q *api.QuotaRequest) computeapi.QuotaRequest {
	return computeapi.QuotaRequest{Id: q.ID, Project: q.Project, Tier: string(q.Tier), State: computeapi.QuotaRequestState(q.State),
		Limit:  computeapi.QuotaLimit{MilliCPU: q.Limit.MilliCPU, MemoryBytes: q.Limit.MemoryBytes, Gpus: q.Limit.GPUs, Pods: q.Limit.Pods, StorageBytes: q.Limit.StorageBytes},
		Reason: q.Reason, Requester: q.Requester, Created: q.Created, Reviewer: q.Reviewer, Decided: q.Decided, Decision: q.Decision}
}
