package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Projects as a resource. Admission is the one writer of the projects
// bucket (bus.BucketProjects), as it is of the workloads bucket: the
// gateway decides who may ask (platform admins, self-service users, a
// project's admins), admission keeps what must hold whoever asks: a valid
// and unique name, the self-service limit per user, no deletion while
// the project holds workloads, and at least one admin. Every change is
// one compare-and-set of the project's document, so nothing is ever half
// written.

// staleCreation is how long a self-service creation counted for its user
// but not (yet) stored as a project is believed to be in flight; after
// that its writer is taken to have died and it no longer counts.
const staleCreation = time.Minute

func (s *Service) projects(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := s.bus.KV(ctx, bus.BucketProjects)
	if err != nil {
		return nil, unavailable(fmt.Errorf("projects bucket: %w", err))
	}
	return kv, nil
}

// CreateProject creates a project with its owner as its one admin. With
// MaxPerCreator set (self-service) the owner is the caller, and the
// caller may have made at most that many projects.
func (s *Service) CreateProject(ctx context.Context, req api.ProjectCreate, p Principal) (*api.ProjectDoc, error) {
	if fe := req.Validate(); len(fe) > 0 {
		return nil, invalid(fe)
	}
	selfService := req.MaxPerCreator > 0
	owner := req.Owner
	if owner == "" {
		owner = p.Name
	}
	if selfService && owner != p.Name {
		return nil, invalid(api.FieldErrors{{Field: "owner", Code: api.CodeForbidden, Reason: "a project you create yourself is owned by you; a platform admin can name another owner"}})
	}
	if owner == "" {
		return nil, invalid(api.FieldErrors{{Field: "owner", Code: api.CodeRequired, Reason: "the project needs an owner"}})
	}
	kv, err := s.projects(ctx)
	if err != nil {
		return nil, err
	}
	if selfService {
		// A project that tokens name and that holds workloads is
		// someone's already: only a platform admin may register it.
		n, err := s.countWorkloads(ctx, req.Name)
		if err != nil {
			return nil, unavailable(err)
		}
		if n > 0 {
			return nil, &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "AlreadyExists", Message: fmt.Sprintf("project %s is in use (it holds workloads); choose another name", req.Name),
				Fields: api.FieldErrors{{Field: "name", Code: api.CodeDuplicate, Reason: "in use; only a platform admin may register it"}}}}
		}
		if err := s.countCreation(ctx, kv, p.Name, req.Name, req.MaxPerCreator); err != nil {
			return nil, err
		}
	}
	now := time.Now().UTC()
	doc := &api.ProjectDoc{Name: req.Name, DisplayName: req.DisplayName, Description: req.Description, Owner: owner, Labels: req.Labels,
		Members: []api.Member{{Kind: api.MemberUser, Name: owner, Role: api.RoleAdmin, Added: now, AddedBy: p.Name}},
		Created: now, CreatedBy: p.Name, SelfService: selfService, Updated: now}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, unavailable(err)
	}
	if _, err := kv.Create(ctx, api.ProjectKey(req.Name), b); err != nil {
		if selfService {
			s.uncountCreation(ctx, kv, p.Name, req.Name)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "AlreadyExists", Message: fmt.Sprintf("project %s already exists", req.Name),
				Fields: api.FieldErrors{{Field: "name", Code: api.CodeDuplicate, Reason: "a project of this name exists; choose another name"}}}}
		}
		return nil, unavailable(fmt.Errorf("create project %s: %w", req.Name, err))
	}
	s.log.Info("project created", "project", req.Name, "owner", owner, "by", p.Name, "selfService", selfService)
	return doc, nil
}

// countCreation counts project among the self-service projects of user,
// refusing it when user has made max already. A creation counted but
// never stored (its writer died) stops counting after staleCreation.
func (s *Service) countCreation(ctx context.Context, kv jetstream.KeyValue, user, project string, maxPerUser int) error {
	_, err := bus.Update(ctx, kv, api.ProjectCreationsKey(user), func(cur []byte, exists bool) ([]byte, error) {
		c := api.ProjectCreations{Projects: map[string]time.Time{}}
		if exists {
			if err := json.Unmarshal(cur, &c); err != nil {
				return nil, unavailable(fmt.Errorf("decode creations of %s: %w", user, err))
			}
			if c.Projects == nil {
				c.Projects = map[string]time.Time{}
			}
		}
		if _, ok := c.Projects[project]; ok {
			return nil, bus.ErrNoChange // a retry of the same creation
		}
		for name, at := range c.Projects {
			if time.Since(at) < staleCreation {
				continue
			}
			if _, err := kv.Get(ctx, api.ProjectKey(name)); errors.Is(err, jetstream.ErrKeyNotFound) {
				delete(c.Projects, name)
			}
		}
		if len(c.Projects) >= maxPerUser {
			return nil, &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "ProjectLimitReached",
				Message: fmt.Sprintf("%s has created %d projects, the most a user may create; ask a platform admin, or delete one", user, len(c.Projects))}}
		}
		c.Projects[project] = time.Now().UTC()
		return json.Marshal(c)
	})
	if err != nil && !errors.Is(err, bus.ErrNoChange) {
		return writeError(err, "the projects of "+user)
	}
	return nil
}

// uncountCreation forgets project among user's self-service projects.
func (s *Service) uncountCreation(ctx context.Context, kv jetstream.KeyValue, user, project string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	defer cancel()
	_, err := bus.Update(ctx, kv, api.ProjectCreationsKey(user), func(cur []byte, exists bool) ([]byte, error) {
		var c api.ProjectCreations
		if !exists || json.Unmarshal(cur, &c) != nil {
			return nil, bus.ErrNoChange
		}
		if _, ok := c.Projects[project]; !ok {
			return nil, bus.ErrNoChange
		}
		delete(c.Projects, project)
		return json.Marshal(c)
	})
	if err != nil && !errors.Is(err, bus.ErrNoChange) {
		// It stops counting after staleCreation.
		s.log.Warn("forget a self-service creation", "user", user, "project", project, "err", err)
	}
}

// getProject reads a project's document and revision.
func getProject(ctx context.Context, kv jetstream.KeyValue, project string) (*api.ProjectDoc, uint64, error) {
	e, err := kv.Get(ctx, api.ProjectKey(project))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, projectNotFound(project)
	}
	if err != nil {
		return nil, 0, unavailable(err)
	}
	var d api.ProjectDoc
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		return nil, 0, unavailable(fmt.Errorf("decode project %s: %w", project, err))
	}
	return &d, e.Revision(), nil
}

func projectNotFound(project string) *Error {
	return &Error{Status: api.StatusNotFound, Body: api.ErrorBody{Code: "NotFound", Message: fmt.Sprintf("project %s not found", project)}}
}

// DeleteProject deletes a project that holds no workloads; its members
// and tokens go with it. With cascade it marks the project deleting and
// starts deleting everything it holds (cascade.go), in the background.
func (s *Service) DeleteProject(ctx context.Context, project string, cascade bool, p Principal) error {
	kv, err := s.projects(ctx)
	if err != nil {
		return err
	}
	doc, rev, err := getProject(ctx, kv, project)
	if err != nil {
		return err
	}
	if cascade || doc.Deleting != nil {
		if err := s.markDeleting(ctx, kv, project, p); err != nil {
			return err
		}
		s.log.Info("project deletion started", "project", project, "by", p.Name)
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
			defer cancel()
			// A few quick attempts (the propagator may still be removing
			// the workloads); then the repair leader's.
			var err error
			for delay := 250 * time.Millisecond; delay <= 4*time.Second; delay *= 2 {
				if err = s.finishDeletion(ctx, project); err == nil {
					return
				}
				time.Sleep(delay)
			}
			s.log.Warn("project deletion not finished; the repair leader retries", "project", project, "err", err)
		}()
		return nil
	}
	keys, err := s.workloadKeys(ctx, project)
	if err != nil {
		return unavailable(err)
	}
	if len(keys) > 0 {
		return notEmpty(project, keys)
	}
	tokens, err := listKeys(ctx, kv, api.TokenProjectFilter(project))
	if err != nil {
		return unavailable(err)
	}
	for _, k := range tokens {
		if err := kv.Delete(ctx, k); err != nil {
			return unavailable(fmt.Errorf("delete token %s: %w", k, err))
		}
	}
	if _, err := bus.CompareAndDelete(ctx, s.bus.JS, kv, api.ProjectKey(project), rev); err != nil {
		return writeError(err, "project "+project)
	}
	if doc.SelfService {
		s.uncountCreation(ctx, kv, doc.CreatedBy, project)
	}
	s.log.Info("project deleted", "project", project, "by", p.Name)
	return nil
}

// countWorkloads counts the workloads stored for project (at most a few:
// one is enough to refuse).
func (s *Service) countWorkloads(ctx context.Context, project string) (int, error) {
	lister, err := s.workloads.ListKeysFiltered(ctx, project+".>")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return 0, nil
		}
		return 0, fmt.Errorf("list workloads of %s: %w", project, err)
	}
	n := 0
	for range lister.Keys() {
		n++
	}
	return n, nil
}

// SetMember adds a member to a project or changes its role; the last
// admin is not demoted.
func (s *Service) SetMember(ctx context.Context, req api.MemberSet, p Principal) (*api.ProjectDoc, error) {
	if fe := req.Validate(); len(fe) > 0 {
		return nil, invalid(fe)
	}
	return s.changeMembers(ctx, req.Project, func(d *api.ProjectDoc) error {
		cur, found := d.Member(req.Kind, req.Name)
		if found && cur.Role == req.Role {
			return bus.ErrNoChange
		}
		if found && cur.Role == api.RoleAdmin && d.Admins() == 1 {
			return lastAdmin(req.Project, req.Kind, req.Name)
		}
		if !found && len(d.Members) >= api.MaxProjectMembers {
			return &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "TooManyMembers",
				Message: fmt.Sprintf("project %s has %d members, the most a project may have; add a group instead", req.Project, len(d.Members))}}
		}
		d.SetMember(api.Member{Kind: req.Kind, Name: req.Name, Role: req.Role, Added: time.Now().UTC(), AddedBy: p.Name})
		return nil
	})
}

// RemoveMember removes a member from a project; the last admin stays.
func (s *Service) RemoveMember(ctx context.Context, req api.MemberRemove, _ Principal) (*api.ProjectDoc, error) {
	if fe := req.Validate(); len(fe) > 0 {
		return nil, invalid(fe)
	}
	return s.changeMembers(ctx, req.Project, func(d *api.ProjectDoc) error {
		cur, found := d.Member(req.Kind, req.Name)
		if !found {
			return &Error{Status: api.StatusNotFound, Body: api.ErrorBody{Code: "NotFound", Message: fmt.Sprintf("%s %s is not a member of project %s", req.Kind, req.Name, req.Project)}}
		}
		if cur.Role == api.RoleAdmin && d.Admins() == 1 {
			return lastAdmin(req.Project, req.Kind, req.Name)
		}
		d.RemoveMember(req.Kind, req.Name)
		return nil
	})
}

func lastAdmin(project, kind, name string) *Error {
	return &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "LastAdmin",
		Message: fmt.Sprintf("%s %s is the last admin of project %s; make another member admin first", kind, name, project)}}
}

// changeMembers applies change to a project's document with
// compare-and-set and returns the document as stored.
func (s *Service) changeMembers(ctx context.Context, project string, change func(*api.ProjectDoc) error) (*api.ProjectDoc, error) {
	kv, err := s.projects(ctx)
	if err != nil {
		return nil, err
	}
	var out *api.ProjectDoc
	_, err = bus.Update(ctx, kv, api.ProjectKey(project), func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, projectNotFound(project)
		}
		var d api.ProjectDoc
		if err := json.Unmarshal(cur, &d); err != nil {
			return nil, unavailable(fmt.Errorf("decode project %s: %w", project, err))
		}
		out = &d
		if err := change(&d); err != nil {
			return nil, err
		}
		d.Updated = time.Now().UTC()
		return json.Marshal(&d)
	})
	if err != nil && !errors.Is(err, bus.ErrNoChange) {
		return nil, writeError(err, "project "+project)
	}
	return out, nil
}

func (s *Service) projectCreate(ctx context.Context, req api.ProjectCreate, r micro.Request) (*api.ProjectDoc, error) {
	return s.CreateProject(ctx, req, principal(r))
}

func (s *Service) projectDelete(ctx context.Context, req api.ProjectRef, r micro.Request) (api.Ack, error) {
	if err := s.DeleteProject(ctx, req.Project, req.Cascade, principal(r)); err != nil {
		return nil, err
	}
	return api.Ack{"deleted": true}, nil
}

func (s *Service) memberSet(ctx context.Context, req api.MemberSet, r micro.Request) (*api.ProjectDoc, error) {
	return s.SetMember(ctx, req, principal(r))
}

func (s *Service) memberRemove(ctx context.Context, req api.MemberRemove, r micro.Request) (*api.ProjectDoc, error) {
	return s.RemoveMember(ctx, req, principal(r))
}
