package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Deleting a project with cascade. The request marks the project's
// document deleting (one compare-and-set): from then on nothing is
// created in it, and the deletion is admission's to finish, whoever
// asked and whichever replica runs. finishDeletion then deletes, each
// step idempotent: every workload (its quota released, its hosts freed,
// its deletion announced, so the propagator removes it from the member
// clusters), every Config and Secret, every token, the project's
// namespaces in the member clusters (the propagator), its quota ledger
// (the quota service), and at last the document itself. The replica holding the repair lease finishes every
// project it finds deleting, every DeletionRetry, so a deletion cut short
// by a crash is finished when admission runs again; nothing is half
// written, because the document goes last.

// DeletionRetry is how often the repair leader looks for deleting
// projects to finish.
const DeletionRetry = 10 * time.Second

// maxListedWorkloads is how many workloads a refused deletion names.
const maxListedWorkloads = 20

func projectDeleting(project string) *Error {
	return &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "Deleting", Message: fmt.Sprintf("project %s is being deleted", project)}}
}

// notEmpty refuses the deletion of a project that holds workloads,
// naming them.
func notEmpty(project string, keys []string) *Error {
	names := make([]string, 0, min(len(keys), maxListedWorkloads))
	for _, k := range keys[:min(len(keys), maxListedWorkloads)] {
		if _, kind, name, err := api.ParseKey(k); err == nil {
			names = append(names, kind+"/"+name)
		}
	}
	more := ""
	if len(keys) > len(names) {
		more = fmt.Sprintf(" and %d more", len(keys)-len(names))
	}
	return &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "NotEmpty",
		Message: fmt.Sprintf("project %s holds %d workloads (%s%s); delete them first, or delete the project with cascade", project, len(keys), strings.Join(names, ", "), more)}}
}

// workloadKeys lists the keys of the workloads (Configs and Secrets
// too) stored for project.
func (s *Service) workloadKeys(ctx context.Context, project string) ([]string, error) {
	keys, err := listKeys(ctx, s.workloads, project+".>")
	if err != nil {
		return nil, err
	}
	slices.Sort(keys)
	return keys, nil
}

// markDeleting sets the project's document deleting, if it is not yet.
func (s *Service) markDeleting(ctx context.Context, kv jetstream.KeyValue, project string, p Principal) error {
	_, err := bus.Update(ctx, kv, api.ProjectKey(project), func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, projectNotFound(project)
		}
		var d api.ProjectDoc
		if err := json.Unmarshal(cur, &d); err != nil {
			return nil, unavailable(fmt.Errorf("decode project %s: %w", project, err))
		}
		if d.Deleting != nil {
			return nil, bus.ErrNoChange
		}
		now := time.Now().UTC()
		d.Deleting = &api.ProjectDeletion{Started: now, By: p.Name}
		d.Updated = now
		return json.Marshal(&d)
	})
	if err != nil && !errors.Is(err, bus.ErrNoChange) {
		return writeError(err, "project "+project)
	}
	return nil
}

// finishDeletion deletes what a deleting project holds, then the project.
func (s *Service) finishDeletion(ctx context.Context, project string) error {
	kv, err := s.projects(ctx)
	if err != nil {
		return err
	}
	// 1. Workloads before the Configs and Secrets they name.
	keys, err := s.workloadKeys(ctx, project)
	if err != nil {
		return err
	}
	slices.SortStableFunc(keys, func(a, b string) int { return configRank(a) - configRank(b) })
	for _, k := range keys {
		_, kind, name, err := api.ParseKey(k)
		if err != nil {
			continue
		}
		err = s.DeleteRef(ctx, api.WorkloadRef{Project: project, Kind: kind, Name: name, Force: true})
		var ae *Error
		if errors.As(err, &ae) && ae.Status == api.StatusNotFound {
			err = nil
		}
		if err != nil {
			return fmt.Errorf("delete %s: %w", k, err)
		}
		s.log.Info("project deletion: workload deleted", "project", project, "kind", kind, "name", name)
	}
	// 2. Tokens.
	tokens, err := listKeys(ctx, kv, api.TokenProjectFilter(project))
	if err != nil {
		return err
	}
	for _, k := range tokens {
		if err := kv.Delete(ctx, k); err != nil {
			return fmt.Errorf("delete token %s: %w", k, err)
		}
	}
	// 3. The namespaces in the member clusters (the propagator).
	if _, err := bus.PropagatorRemoveProject.Call(ctx, s.quota, api.ProjectRef{Project: project}); err != nil {
		return fmt.Errorf("remove the namespaces of %s: %w", project, err)
	}
	// 4. The quota ledger (the releases above emptied it).
	if _, err := bus.QuotaForget.Call(ctx, s.quota, api.ProjectRef{Project: project}); err != nil {
		return fmt.Errorf("forget the quota of %s: %w", project, err)
	}
	// 5. The document, last: what is left of the project is deleting until then.
	doc, rev, err := getProject(ctx, kv, project)
	if err != nil {
		var ae *Error
		if errors.As(err, &ae) && ae.Status == api.StatusNotFound {
			return nil // another run finished it
		}
		return err
	}
	if left, err := s.workloadKeys(ctx, project); err != nil || len(left) > 0 {
		return fmt.Errorf("project %s still holds %d workloads: %w", project, len(left), err)
	}
	if _, err := bus.CompareAndDelete(ctx, s.bus.JS, kv, api.ProjectKey(project), rev); err != nil {
		return fmt.Errorf("delete project %s: %w", project, err)
	}
	if doc.SelfService {
		s.uncountCreation(ctx, kv, doc.CreatedBy, project)
	}
	s.log.Info("project deleted with cascade", "project", project, "by", doc.Deleting.By, "workloads", len(keys), "tokens", len(tokens))
	return nil
}

// configRank orders Configs and Secrets after the workloads naming them.
func configRank(key string) int {
	_, kind, _, err := api.ParseKey(key)
	if err == nil && (kind == api.KindConfig || kind == api.KindSecret) {
		return 1
	}
	return 0
}

// resumeDeletions finishes, every DeletionRetry while ctx lasts, every
// project found deleting (the repair leader runs it).
func (s *Service) resumeDeletions(ctx context.Context) {
	for {
		s.finishDeleting(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(DeletionRetry):
		}
	}
}

// finishDeleting finishes every project found deleting.
func (s *Service) finishDeleting(ctx context.Context) {
	kv, err := s.projects(ctx)
	if err != nil {
		return
	}
	keys, err := listKeys(ctx, kv, api.ProjectFilter)
	if err != nil {
		s.log.Warn("list projects for deletions", "err", err)
		return
	}
	for _, k := range keys {
		project, _ := api.ProjectOfKey(k)
		doc, _, err := getProject(ctx, kv, project)
		if err != nil || doc.Deleting == nil {
			continue
		}
		s.log.Info("finishing a project deletion", "project", project, "started", doc.Deleting.Started)
		if err := s.finishDeletion(ctx, project); err != nil && ctx.Err() == nil {
			s.log.Warn("project deletion not finished; retried", "project", project, "err", err)
		}
	}
}
