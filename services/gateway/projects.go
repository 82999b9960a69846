package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
)

// Projects as a resource, and the roles their members hold. Admission
// writes the projects bucket; every gateway replica watches it
// (memberships), and a request's role in a project is the highest of what
// its token or JWT names and what the project's members give its subject
// or one of its groups, computed when the request is authenticated: a
// change holds at every replica as soon as its watch delivers it
// (milliseconds), with nothing restarted or reloaded.

// DefaultMaxProjectsPerUser is how many projects a user may create by
// self-service unless configured otherwise.
const DefaultMaxProjectsPerUser = 3

// memberships is the roles index of the projects bucket, fed by its watch.
type memberships struct {
	mu sync.RWMutex
	// docs holds each registered project's document; mu must be held.
	docs map[string]*api.ProjectDoc
	// roles maps a principal ("user:<subject>", "group:<name>") to its
	// role per project; mu must be held.
	roles map[string]map[string]auth.Role
	// changed is closed, and replaced, at every change; mu must be held.
	changed chan struct{}
}

func newMemberships() *memberships {
	return &memberships{docs: map[string]*api.ProjectDoc{}, roles: map[string]map[string]auth.Role{}, changed: make(chan struct{})}
}

func principalKey(kind, name string) string { return kind + ":" + name }

// set replaces what the index holds of project with doc (nil: deleted).
func (m *memberships) set(project string, doc *api.ProjectDoc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.docs[project]; old != nil {
		for _, mb := range old.Members {
			k := principalKey(mb.Kind, mb.Name)
			delete(m.roles[k], project)
			if len(m.roles[k]) == 0 {
				delete(m.roles, k)
			}
		}
	}
	delete(m.docs, project)
	if doc != nil {
		m.docs[project] = doc
		for _, mb := range doc.Members {
			k := principalKey(mb.Kind, mb.Name)
			if m.roles[k] == nil {
				m.roles[k] = map[string]auth.Role{}
			}
			m.roles[k][project] = m.roles[k][project].Max(auth.Role(mb.Role))
		}
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

// get returns a registered project's document (not to be modified).
func (m *memberships) get(project string) (*api.ProjectDoc, <-chan struct{}) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.docs[project], m.changed
}

// list returns every registered project's document, by name.
func (m *memberships) list() []*api.ProjectDoc {
	m.mu.RLock()
	out := slices.Collect(maps.Values(m.docs))
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b *api.ProjectDoc) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// withRoles returns id with the roles its memberships give it added (the
// highest role per project applies); id itself when they add nothing.
func (m *memberships) withRoles(id *auth.Identity) *auth.Identity {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out *auth.Identity
	add := func(k string) {
		for p, role := range m.roles[k] {
			if id.Roles[p].Max(role) == id.Roles[p] {
				continue
			}
			if out == nil {
				cp := *id
				cp.Roles = maps.Clone(id.Roles)
				if cp.Roles == nil {
					cp.Roles = map[string]auth.Role{}
				}
				out = &cp
			}
			out.Roles[p] = out.Roles[p].Max(role)
		}
	}
	add(principalKey(api.MemberUser, id.Subject))
	for _, g := range id.Groups {
		add(principalKey(api.MemberGroup, g))
	}
	if out == nil {
		return id
	}
	return out
}

// startProjects mirrors the projects bucket into s.members and waits
// for its first replay, so that no request is judged without the roles
// stored before the gateway started.
func (s *Service) startProjects(ctx, runCtx context.Context) error {
	var mu sync.Mutex // holds onChange until the mirror is assigned
	mu.Lock()
	var m *bus.TypedMirror[*api.ProjectDoc]
	decode := func(b []byte) (*api.ProjectDoc, error) {
		var d api.ProjectDoc
		return &d, json.Unmarshal(b, &d)
	}
	m, err := bus.MirrorOf(runCtx, s.bus, bus.BucketProjects, api.ProjectFilter, decode, func(key string) {
		mu.Lock()
		mm := m
		mu.Unlock()
		project, ok := api.ProjectOfKey(key)
		if !ok {
			return
		}
		e, found := mm.Get(key)
		if !found || e.Err != nil {
			if found {
				s.log.Warn("unreadable project document", "project", project, "err", e.Err)
			}
			s.members.set(project, nil)
			return
		}
		s.members.set(project, e.Value)
		if e.Value.Deleting != nil && s.events != nil {
			// Nothing of a deleted project is left: its events
			// credentials, their connections and consumers go first.
			go s.events.revokeProject(runCtx, s.js, project)
		}
	})
	s.projects = m
	mu.Unlock()
	if err != nil {
		return fmt.Errorf("mirror projects: %w", err)
	}
	select {
	case <-m.Ready():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("projects mirror not ready: %w", ctx.Err())
	}
}

// waitProject waits, at most the read-your-writes bound, for this
// replica's index to hold a document of project that satisfies ok (nil
// for a deleted project).
func (s *Service) waitProject(ctx context.Context, project string, ok func(*api.ProjectDoc) bool) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadYourWrites)
	defer cancel()
	for {
		doc, changed := s.members.get(project)
		if ok(doc) {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// projectView is the API's view of a project for a caller with role.
func projectView(d *api.ProjectDoc, role string, withMembers bool) computeapi.Project {
	p := computeapi.Project{Name: d.Name, Role: role, Registered: true, DisplayName: d.DisplayName, Description: d.Description,
		Owner: d.Owner, Labels: d.Labels, Created: d.Created, CreatedBy: d.CreatedBy, SelfService: d.SelfService}
	if withMembers {
		p.Members = membersView(d.Members)
	}
	return p
}

func membersView(ms []api.Member) []computeapi.Member {
	out := make([]computeapi.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, memberView(m))
	}
	return out
}

func memberView(m api.Member) computeapi.Member {
	return computeapi.Member{Kind: m.Kind, Name: m.Name, Role: m.Role, Added: m.Added, AddedBy: m.AddedBy}
}

// callerRole names id's role in project for a view.
func callerRole(id *auth.Identity, project string) string {
	if r, ok := id.Roles[project]; ok && r.Valid() {
		return string(r)
	}
	if id.PlatformAdmin {
		return "platform-admin"
	}
	return ""
}

// writeInvalid answers 422 naming every field problem.
func writeInvalid(w http.ResponseWriter, r *http.Request, fe api.FieldErrors) {
	writeErrorBody(w, r, http.StatusUnprocessableEntity, apiError(api.ErrorBody{Code: "Invalid", Message: fe.Error(), Fields: fe}))
}

// CreateProject creates a project: platform admins name any owner;
// with self-service on, any signed-in user creates projects it owns, up
// to its limit.
func (s *Service) CreateProject(w http.ResponseWriter, r *http.Request) {
	id := identity(r)
	var body computeapi.ProjectCreate
	if !decodeBody(w, r, &body) {
		return
	}
	req := api.ProjectCreate{Name: body.Name, DisplayName: body.DisplayName, Description: body.Description, Owner: body.Owner, Labels: body.Labels}
	if fe := req.Validate(); len(fe) > 0 {
		writeInvalid(w, r, fe)
		return
	}
	switch {
	case id.PlatformAdmin:
	case s.cfg.SelfServiceProjects:
		if req.Owner != "" && req.Owner != id.Subject {
			writeErrorBody(w, r, http.StatusForbidden, apiError(api.ErrorBody{Code: "Forbidden", Message: "a project you create is owned by you",
				Fields: api.FieldErrors{{Field: "owner", Code: api.CodeForbidden, Reason: "only platform admins name another owner; leave it empty"}}}))
			return
		}
		// A project only tokens name, which holds workloads or quota, is
		// someone's already: only a platform admin may register it.
		_, ledger := s.quota.Get(api.QuotaProjectKey(req.Name))
		inUse, err := s.cache.HasProject(r.Context(), req.Name)
		if err != nil {
			writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the workloads are out of reach; retry", err)
			return
		}
		if ledger || inUse {
			writeErrorBody(w, r, http.StatusConflict, apiError(api.ErrorBody{Code: "AlreadyExists", Message: "project " + req.Name + " is in use (it holds workloads or quota); choose another name",
				Fields: api.FieldErrors{{Field: "name", Code: api.CodeDuplicate, Reason: "in use; only a platform admin may register it"}}}))
			return
		}
		req.MaxPerCreator = s.cfg.MaxProjectsPerUser
	default:
		writeError(w, r, http.StatusForbidden, "Forbidden", "only platform admins create projects in this region; ask one")
		return
	}
	doc, err := call(s, r, bus.ProjectCreate, req)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	s.waitProject(r.Context(), doc.Name, func(d *api.ProjectDoc) bool { return d != nil })
	// The request's identity predates the project: its owner's role
	// comes from the stored document.
	role := id.Roles[doc.Name]
	if m, ok := doc.Member(api.MemberUser, id.Subject); ok {
		role = role.Max(auth.Role(m.Role))
	}
	view := string(role)
	if !role.Valid() {
		view = callerRole(id, doc.Name)
	}
	writeJSON(w, http.StatusCreated, projectView(doc, view, true))
}

// registered authorizes a request on a registered project and returns
// its document; it answers 403 or 404 itself and then returns nil.
func (s *Service) registered(w http.ResponseWriter, r *http.Request, project string, need auth.Role) *api.ProjectDoc {
	if !allow(w, r, project, need, true) {
		return nil
	}
	doc, _ := s.members.get(project)
	if doc == nil {
		writeError(w, r, http.StatusNotFound, "NotFound", "project "+project+" is not registered (POST /v1/projects creates it)")
		return nil
	}
	return doc
}

// GetProject serves a registered project with its members.
func (s *Service) GetProject(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath) {
	if doc := s.registered(w, r, project, auth.RoleViewer); doc != nil {
		writeJSON(w, http.StatusOK, projectView(doc, callerRole(identity(r), project), true))
	}
}

// DeleteProject deletes a registered project that holds no workloads;
// with cascade, it starts the deletion of everything the project holds
// (admission finishes it) and answers 202.
func (s *Service) DeleteProject(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath, params computeapi.DeleteProjectParams) {
	if s.registered(w, r, project, auth.RoleAdmin) == nil {
		return
	}
	if err := send(s, r, bus.ProjectDelete, api.ProjectRef{Project: project, Cascade: params.Cascade}); err != nil {
		writeRemoteError(w, r, err)
		return
	}
	if params.Cascade {
		s.waitProject(r.Context(), project, func(d *api.ProjectDoc) bool { return d == nil || d.Deleting != nil })
		w.WriteHeader(http.StatusAccepted)
		return
	}
	s.waitProject(r.Context(), project, func(d *api.ProjectDoc) bool { return d == nil })
	w.WriteHeader(http.StatusNoContent)
}

// ListMembers serves a registered project's members.
func (s *Service) ListMembers(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath) {
	if doc := s.registered(w, r, project, auth.RoleViewer); doc != nil {
		writeJSON(w, http.StatusOK, computeapi.MemberList{Items: membersView(doc.Members)})
	}
}

// SetMember adds a member to a project or changes its role (the
// project's admins).
func (s *Service) SetMember(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath, member computeapi.MemberPath) {
	if s.registered(w, r, project, auth.RoleAdmin) == nil {
		return
	}
	var body computeapi.MemberChange
	if !decodeBody(w, r, &body) {
		return
	}
	req := api.MemberSet{Project: project, Kind: body.Kind, Name: member, Role: body.Role}
	if req.Kind == "" {
		req.Kind = api.MemberUser
	}
	if fe := req.Validate(); len(fe) > 0 {
		writeInvalid(w, r, fe)
		return
	}
	doc, err := call(s, r, bus.MemberSet, req)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	m, _ := doc.Member(req.Kind, req.Name)
	s.waitProject(r.Context(), project, func(d *api.ProjectDoc) bool {
		if d == nil {
			return false
		}
		got, ok := d.Member(req.Kind, req.Name)
		return ok && got.Role == m.Role && !got.Added.Before(m.Added)
	})
	writeJSON(w, http.StatusOK, memberView(m))
}

// RemoveMember removes a member from a project (the project's admins).
func (s *Service) RemoveMember(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath, member computeapi.MemberPath, params computeapi.RemoveMemberParams) {
	if s.registered(w, r, project, auth.RoleAdmin) == nil {
		return
	}
	req := api.MemberRemove{Project: project, Kind: params.Kind, Name: member}
	if req.Kind == "" {
		req.Kind = api.MemberUser
	}
	if fe := req.Validate(); len(fe) > 0 {
		writeInvalid(w, r, fe)
		return
	}
	if _, err := call(s, r, bus.MemberRemove, req); err != nil {
		writeRemoteError(w, r, err)
		return
	}
	s.waitProject(r.Context(), project, func(d *api.ProjectDoc) bool {
		if d == nil {
			return true
		}
		_, ok := d.Member(req.Kind, req.Name)
		return !ok
	})
	w.WriteHeader(http.StatusNoContent)
}
