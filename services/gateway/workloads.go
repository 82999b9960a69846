package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
	"atoll.dev/services/gateway/cache"
)

// The server implements the generated interface.
var _ computeapi.ServerInterface = (*Service)(nil)

// allow checks the caller's role and answers 403 or 404 when it falls
// short; it reports whether the handler may go on.
func allow(w http.ResponseWriter, r *http.Request, project string, need auth.Role, objectScoped bool) bool {
	switch identity(r).Can(project, need, objectScoped) {
	case auth.Allow:
		return true
	case auth.Hide:
		writeError(w, r, http.StatusNotFound, "NotFound", "not found")
	default:
		writeError(w, r, http.StatusForbidden, "Forbidden", fmt.Sprintf("%s needs the %s role in project %s", identity(r).Subject, need, project))
	}
	return false
}

// ref resolves a workload named in a path: its key and registered kind.
// An unknown kind or a malformed name cannot exist: 404.
func ref(project, kind, name string) (key, registered string, ok bool) {
	key = api.Key(project, kind, name)
	_, registered, _, err := api.ParseKey(key)
	if err != nil || !validToken(name) {
		return "", "", false
	}
	return key, registered, true
}

// workload authorizes a request on one workload and finds it in the
// cache; it answers 403, 404 or 503 itself and then reports !ok.
func (s *Service) workload(w http.ResponseWriter, r *http.Request, project, kind, name string, need auth.Role) (key, registered string, ok bool) {
	_, key, registered, ok = s.workloadItem(w, r, project, kind, name, need)
	return key, registered, ok
}

// workloadItem is workload with the item found: one read, where a
// handler needs both.
func (s *Service) workloadItem(w http.ResponseWriter, r *http.Request, project, kind, name string, need auth.Role) (it *cache.Item, key, registered string, ok bool) {
	if !allow(w, r, project, need, true) {
		return nil, "", "", false
	}
	key, registered, ok = ref(project, kind, name)
	if !ok {
		writeError(w, r, http.StatusNotFound, "NotFound", "not found")
		return nil, "", "", false
	}
	it, found, ok := s.cached(w, r, key)
	if !ok {
		return nil, "", "", false
	}
	if !found {
		writeError(w, r, http.StatusNotFound, "NotFound", "not found")
		return nil, "", "", false
	}
	return it, key, registered, true
}

// cached finds key's item in the cache (or, while it fills, in the
// buckets); it answers 503 itself when the read fails and then reports !ok.
func (s *Service) cached(w http.ResponseWriter, r *http.Request, key string) (it *cache.Item, found, ok bool) {
	it, found, err := s.cache.Get(r.Context(), key)
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the workloads are out of reach; retry", err)
		return nil, false, false
	}
	return it, found, true
}

// principal is the header admission reads to know who asks.
func principal(r *http.Request) nats.Header {
	id := identity(r)
	h := nats.Header{}
	h.Set(bus.HeaderPrincipal, id.Subject)
	if id.PlatformAdmin {
		h.Set(bus.HeaderPlatformAdmin, "true")
	}
	return h
}

// call calls a region service's endpoint on behalf of the caller.
func call[Req, Resp any](s *Service, r *http.Request, ep bus.Call[Req, Resp], req Req) (Resp, error) {
	return ep.CallWithHeader(r.Context(), s.req, principal(r), req)
}

// send is call for an endpoint whose reply says nothing but success.
func send[Req, Resp any](s *Service, r *http.Request, ep bus.Call[Req, Resp], req Req) error {
	return ep.SendWithHeader(r.Context(), s.req, principal(r), req)
}

// readDocument reads a workload document for project, strictly.
func (s *Service) readDocument(w http.ResponseWriter, r *http.Request, project string) (*api.Workload, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if isTooLarge(err) {
			writeError(w, r, http.StatusRequestEntityTooLarge, "TooLarge", fmt.Sprintf("request body exceeds %d bytes", s.cfg.MaxBodyBytes))
		} else {
			writeFailure(w, r, http.StatusBadRequest, "Invalid", "the request body could not be read", err)
		}
		return nil, false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		writeError(w, r, http.StatusBadRequest, "Invalid", "the request needs a workload document")
		return nil, false
	}
	doc, err := api.Decode(body)
	if err != nil {
		var fe api.FieldErrors
		if errors.As(err, &fe) {
			writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: fe.Error(), Fields: fe}))
		} else {
			writeFailure(w, r, http.StatusBadRequest, "Invalid", "the workload document is invalid", err)
		}
		return nil, false
	}
	if doc.Metadata.Project != "" && doc.Metadata.Project != project {
		writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "metadata.project differs from the path's project",
			Fields: api.FieldErrors{{Field: "metadata.project", Code: api.CodeInvalid, Reason: fmt.Sprintf("must be %q (the path's project) or empty", project)}}}))
		return nil, false
	}
	doc.Metadata.Project = project
	if doc.APIVersion == "" {
		doc.APIVersion = api.APIVersion
	}
	return doc, true
}

// respondWorkload answers with the cached view of the workload admission
// stored, once the cache shows that generation (read-your-writes), or with
// the stored document itself when the cache is slower than the bound.
func (s *Service) respondWorkload(w http.ResponseWriter, r *http.Request, status int, doc *api.Workload) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadYourWrites)
	defer cancel()
	gen, uid := doc.Metadata.Generation, doc.Metadata.UID
	var got *cache.Item
	if s.cache.WaitFor(ctx, doc.Key(), func(it *cache.Item) bool {
		got = it
		return it != nil && it.UID == uid && it.Generation >= gen
	}) {
		writeRawJSON(w, status, got.JSON)
		return
	}
	b, err := renderWorkload(doc, nil)
	if err != nil {
		writeFailure(w, r, http.StatusInternalServerError, "Internal", "the workload could not be rendered", err)
		return
	}
	writeRawJSON(w, status, b)
}

// ListWorkloads serves a page of a project's workloads from the cache.
func (s *Service) ListWorkloads(w http.ResponseWriter, r *http.Request, project string, params computeapi.ListWorkloadsParams) {
	if !allow(w, r, project, auth.RoleViewer, false) {
		return
	}
	var f cache.Filter
	if params.Kind != "" {
		_, kind, ok := ref(project, params.Kind, "x")
		if !ok {
			writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "unknown kind " + params.Kind,
				Fields: api.FieldErrors{{Field: "kind", Code: api.CodeUnsupported, Reason: "one of " + strings.Join(api.KindNames(), ", ")}}}))
			return
		}
		f.Kind = kind
	}
	if params.Label != "" {
		f.Labels = map[string]string{}
		for _, pair := range strings.Split(params.Label, ",") {
			k, v, ok := strings.Cut(pair, "=")
			if !ok || k == "" {
				writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "bad label selector",
					Fields: api.FieldErrors{{Field: "label", Code: api.CodeInvalid, Reason: fmt.Sprintf("%q is not key=value", pair)}}}))
				return
			}
			f.Labels[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	f.Phase = params.Phase
	limit := params.Limit
	if limit <= 0 {
		limit = 100
	}
	if limit > 1000 {
		limit = 1000
	}
	after := ""
	if params.Continue != "" {
		b, err := base64.RawURLEncoding.DecodeString(params.Continue)
		if err != nil || !strings.HasPrefix(string(b), project+".") {
			writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "bad continue token",
				Fields: api.FieldErrors{{Field: "continue", Code: api.CodeInvalid, Reason: "not a continue token of this project's list"}}}))
			return
		}
		after = string(b)
	}
	items, next, err := s.cache.List(r.Context(), project, f, after, limit)
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the workloads are out of reach; retry", err)
		return
	}
	var buf bytes.Buffer
	buf.Grow(len(items)*1024 + 64)
	buf.WriteString(`{"items":[`)
	for i, it := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(it.JSON)
	}
	buf.WriteByte(']')
	if next != "" {
		fmt.Fprintf(&buf, `,"continue":%q`, base64.RawURLEncoding.EncodeToString([]byte(next)))
	}
	buf.WriteString("}\n")
	writeRawJSON(w, http.StatusOK, buf.Bytes())
}

// GetWorkload serves one workload with its status from the cache.
func (s *Service) GetWorkload(w http.ResponseWriter, r *http.Request, project, kind, name string) {
	it, _, _, ok := s.workloadItem(w, r, project, kind, name, auth.RoleViewer)
	if !ok {
		return
	}
	writeRawJSON(w, http.StatusOK, it.JSON)
}

// CreateWorkload admits a new workload, once per Idempotency-Key.
func (s *Service) CreateWorkload(w http.ResponseWriter, r *http.Request, project string, params computeapi.CreateWorkloadParams) {
	if !allow(w, r, project, auth.RoleDeveloper, false) || s.deleting(w, r, project) {
		return
	}
	doc, ok := s.readDocument(w, r, project)
	if !ok {
		return
	}
	body, _ := json.Marshal(doc)
	if params.IdempotencyKey != "" {
		s.idempotentCreate(w, r, project, params.IdempotencyKey, body)
		return
	}
	stored, err := call(s, r, bus.AdmissionSubmit, body)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	s.respondWorkload(w, r, http.StatusCreated, stored)
}

// UpdateWorkload replaces a workload's spec and labels.
func (s *Service) UpdateWorkload(w http.ResponseWriter, r *http.Request, project, kind, name string) {
	_, registered, ok := s.workload(w, r, project, kind, name, auth.RoleDeveloper)
	if !ok {
		return
	}
	doc, ok := s.readDocument(w, r, project)
	if !ok {
		return
	}
	if doc.Kind != registered || doc.Metadata.Name != name {
		writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "the document names another workload than the path",
			Fields: api.FieldErrors{{Field: "metadata.name", Code: api.CodeInvalid, Reason: fmt.Sprintf("kind and name must be %s %s, as in the path", registered, name)}}}))
		return
	}
	body, _ := json.Marshal(doc)
	stored, err := call(s, r, bus.AdmissionUpdate, body)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	s.respondWorkload(w, r, http.StatusOK, stored)
}

// DeleteWorkload removes a workload from the region. The query parameter
// force=true deletes a Config or Secret that workloads still name.
func (s *Service) DeleteWorkload(w http.ResponseWriter, r *http.Request, project, kind, name string, params computeapi.DeleteWorkloadParams) {
	key, registered, ok := s.workload(w, r, project, kind, name, auth.RoleDeveloper)
	if !ok {
		return
	}
	if err := send(s, r, bus.AdmissionDelete, api.WorkloadRef{Project: project, Kind: registered, Name: name, Force: params.Force}); err != nil {
		writeRemoteError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadYourWrites)
	defer cancel()
	s.cache.WaitFor(ctx, key, func(it *cache.Item) bool { return it == nil })
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) operate(w http.ResponseWriter, r *http.Request, project, kind, name string, op api.Operation) {
	_, registered, ok := s.workload(w, r, project, kind, name, auth.RoleDeveloper)
	if !ok {
		return
	}
	op.Project, op.Kind, op.Name = project, registered, name
	stored, err := call(s, r, bus.AdmissionOperate, op)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	s.respondWorkload(w, r, http.StatusOK, stored)
}

// OperateWorkload pauses, resumes, stops, starts or restarts a workload.
func (s *Service) OperateWorkload(w http.ResponseWriter, r *http.Request, project, kind, name, op string) {
	switch op {
	case "pause", "resume", "stop", "start", "restart":
	default:
		writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "unknown operation " + op,
			Fields: api.FieldErrors{{Field: "operation", Code: api.CodeUnsupported, Reason: "one of pause, resume, stop, start, restart"}}}))
		return
	}
	s.operate(w, r, project, kind, name, api.Operation{Op: op})
}

// RestartContainer replaces the pods of a workload that run container
// (Kubernetes cannot restart one container of a running pod).
func (s *Service) RestartContainer(w http.ResponseWriter, r *http.Request, project, kind, name, container string) {
	s.operate(w, r, project, kind, name, api.Operation{Op: api.OpRestartContainer, Container: container})
}

// ScaleWorkload sets replicas (App) or parallelism (JobSet).
func (s *Service) ScaleWorkload(w http.ResponseWriter, r *http.Request, project, kind, name string) {
	if !allow(w, r, project, auth.RoleDeveloper, true) {
		return
	}
	var req computeapi.ScaleRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Replicas < 0 {
		writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "replicas must not be negative",
			Fields: api.FieldErrors{{Field: "replicas", Code: api.CodeInvalid, Reason: "must be 0 or more"}}}))
		return
	}
	s.operate(w, r, project, kind, name, api.Operation{Op: api.OpScale, Replicas: &req.Replicas})
}

// decodeBody decodes a small JSON body strictly into v, answering 400 or 413 on failure.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the document")
	}
	switch {
	case err == nil:
		return true
	case isTooLarge(err):
		writeFailure(w, r, http.StatusRequestEntityTooLarge, "TooLarge", "the request body is too large", err)
	default:
		writeFailure(w, r, http.StatusBadRequest, "Invalid", "bad request body: "+api.DescribeJSONError(err, v), err)
	}
	return false
}
