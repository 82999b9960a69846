package gateway

import (
	"encoding/json"
	"net/http"
	"sort"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
)

// WhoAmI tells the caller who it is.
func (s *Service) WhoAmI(w http.ResponseWriter, r *http.Request) {
	id := identity(r)
	roles := map[string]computeapi.IdentityRoles{}
	for p, role := range id.Roles {
		roles[p] = computeapi.IdentityRoles(role)
	}
	writeJSON(w, http.StatusOK, computeapi.Identity{Subject: id.Subject, PlatformAdmin: id.PlatformAdmin, Roles: roles})
}

// ListProjects lists the projects the caller holds a role in; a platform
// admin sees every registered project and every one with workloads or
// quota.
func (s *Service) ListProjects(w http.ResponseWriter, r *http.Request) {
	id := identity(r)
	seen := map[string]string{}
	for p, role := range id.Roles {
		seen[p] = string(role)
	}
	if id.PlatformAdmin {
		projects, err := s.cache.Projects(r.Context())
		if err != nil {
			writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the gateway is still reading the region's workloads; retry", err)
			return
		}
		for _, p := range projects {
			if _, ok := seen[p]; !ok {
				seen[p] = "platform-admin"
			}
		}
		for _, k := range s.quota.Keys() {
			p, ok := api.QuotaProjectOfKey(k)
			if !ok {
				continue
			}
			if _, ok := seen[p]; !ok {
				seen[p] = "platform-admin"
			}
		}
	}
	out := computeapi.ProjectList{Items: []computeapi.Project{}}
	// Registered projects with their details (projects.go); a platform
	// admin sees every one.
	for _, d := range s.members.list() {
		role, ok := seen[d.Name]
		if !ok && !id.PlatformAdmin {
			continue
		}
		if !ok {
			role = "platform-admin"
		}
		delete(seen, d.Name)
		out.Items = append(out.Items, projectView(d, role, false))
	}
	for p, role := range seen {
		out.Items = append(out.Items, computeapi.Project{Name: p, Role: role})
	}
	sort.Slice(out.Items, func(i, j int) bool { return out.Items[i].Name < out.Items[j].Name })
	writeJSON(w, http.StatusOK, out)
}

// GetQuota shows a project's limits and usage per tier.
func (s *Service) GetQuota(w http.ResponseWriter, r *http.Request, project string) {
	if !allow(w, r, project, auth.RoleViewer, false) {
		return
	}
	var l *api.Ledger
	if e, ok := s.quota.Get(api.QuotaProjectKey(project)); ok {
		l = new(api.Ledger)
		if err := json.Unmarshal(e.Value, l); err != nil {
			writeFailure(w, r, http.StatusInternalServerError, "Internal", "the project's quota ledger is unreadable", err)
			return
		}
	}
	writeJSON(w, http.StatusOK, quotaView(project, l, s.regionQuota()))
}

// regionQuota is the region's default quota as the quota service
// published it; before it has, nothing (every cap 0).
func (s *Service) regionQuota() api.QuotaDefaults {
	var d api.QuotaDefaults
	if e, ok := s.quotaDefaults.Get(api.QuotaDefaultsKey); ok {
		if err := json.Unmarshal(e.Value, &d); err != nil {
			s.log.Warn("unreadable quota defaults", "err", err)
		}
	}
	return d
}

// SetQuota sets one tier's limit of a project (platform admins).
func (s *Service) SetQuota(w http.ResponseWriter, r *http.Request, project, tier string) {
	if !platformAdmin(w, r) {
		return
	}
	if !validTier(tier) {
		writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "unknown tier " + tier,
			Fields: api.FieldErrors{{Field: "tier", Code: api.CodeUnsupported, Reason: "one of Reserved, OnDemand, Preemptible"}}}))
		return
	}
	var lim computeapi.QuotaLimit
	if !decodeBody(w, r, &lim) {
		return
	}
	var fe api.FieldErrors
	for _, a := range []struct {
		field string
		v     *int64
	}{{"milliCPU", lim.MilliCPU}, {"memoryBytes", lim.MemoryBytes}, {"gpus", lim.Gpus}, {"pods", lim.Pods}, {"storageBytes", lim.StorageBytes}} {
		if a.v != nil && *a.v < 0 {
			fe = append(fe, api.FieldError{Field: a.field, Code: api.CodeInvalid, Reason: "a cap is 0 (forbidden) or more"})
		}
	}
	if len(fe) > 0 {
		writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "limits must not be negative", Fields: fe}))
		return
	}
	set := api.QuotaSet{Project: project, Tier: api.Tier(tier),
		Limit: api.Limit{MilliCPU: lim.MilliCPU, MemoryBytes: lim.MemoryBytes, GPUs: lim.Gpus, Pods: lim.Pods, StorageBytes: lim.StorageBytes}}
	if err := send(s, r, bus.QuotaSet, set); err != nil {
		writeRemoteError(w, r, err)
		return
	}
	l, err := call(s, r, bus.QuotaGet, api.QuotaRelease{Project: project})
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, quotaView(project, l, s.regionQuota()))
}

func platformAdmin(w http.ResponseWriter, r *http.Request) bool {
	if identity(r).PlatformAdmin {
		return true
	}
	writeError(w, r, http.StatusForbidden, "Forbidden", identity(r).Subject+" is not a platform admin")
	return false
}

// ListClusters lists the region's member clusters (platform admins).
func (s *Service) ListClusters(w http.ResponseWriter, r *http.Request) {
	if !platformAdmin(w, r) {
		return
	}
	keys := s.clusters.Keys()
	sort.Strings(keys)
	out := computeapi.ClusterList{Items: []computeapi.Cluster{}}
	for _, k := range keys {
		if c, ok := s.cluster(k); ok {
			out.Items = append(out.Items, clusterView(c))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Service) cluster(name string) (*api.ClusterInfo, bool) {
	e, ok := s.clusters.Get(name)
	if !ok {
		return nil, false
	}
	var c api.ClusterInfo
	if json.Unmarshal(e.Value, &c) != nil {
		return nil, false
	}
	return &c, true
}

// GetCluster shows one cluster's capacity and health (platform admins).
func (s *Service) GetCluster(w http.ResponseWriter, r *http.Request, name string) {
	if !platformAdmin(w, r) {
		return
	}
	c, ok := s.cluster(name)
	if !ok {
		writeError(w, r, http.StatusNotFound, "NotFound", "no cluster "+name)
		return
	}
	writeJSON(w, http.StatusOK, clusterView(c))
}

func (s *Service) clusterOp(w http.ResponseWriter, r *http.Request, op api.ClusterOp) {
	if !platformAdmin(w, r) {
		return
	}
	if _, ok := s.cluster(op.Cluster); !ok {
		writeError(w, r, http.StatusNotFound, "NotFound", "no cluster "+op.Cluster)
		return
	}
	op.Principal = identity(r).Subject
	c, err := call(s, r, bus.AggregatorCluster, op)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, clusterView(c))
}

// CordonCluster cordons or uncordons a cluster (platform admins).
func (s *Service) CordonCluster(w http.ResponseWriter, r *http.Request, name, action string) {
	if action != "cordon" && action != "uncordon" {
		writeError(w, r, http.StatusBadRequest, "Invalid", "action must be cordon or uncordon")
		return
	}
	s.clusterOp(w, r, api.ClusterOp{Cluster: name, Op: action})
}

// EditClusterLabels sets and removes a cluster's labels (platform admins).
func (s *Service) EditClusterLabels(w http.ResponseWriter, r *http.Request, name string) {
	var p computeapi.LabelPatch
	if !platformAdmin(w, r) || !decodeBody(w, r, &p) {
		return
	}
	if len(p.Set) == 0 && len(p.Remove) == 0 {
		writeError(w, r, http.StatusBadRequest, "Invalid", "the patch sets and removes nothing")
		return
	}
	s.clusterOp(w, r, api.ClusterOp{Cluster: name, Op: api.ClusterOpLabels, SetLabels: p.Set, RemoveLabels: p.Remove})
}

func validTier(t string) bool {
	for _, x := range api.Tiers {
		if string(x) == t {
			return true
		}
	}
	return false
}
