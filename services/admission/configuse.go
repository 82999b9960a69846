package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Workloads name Configs and Secrets of their project (api.ConfigUse).
// Admission, the one writer of the workloads bucket where both live, keeps
// the references whole:
//
//   - a workload written with a reference to a missing Config or Secret,
//     or to a key it does not hold, is refused (422, naming the field and
//     the name), unless the reference is optional;
//   - an App's template carries the content version of each Config and
//     Secret it rolls on (PodTemplate.ConfigVersions), set at every write
//     from what is stored, so that a change of content is a template
//     change that the App's zone-by-zone rollout carries out; other kinds
//     read the new content on their next run and carry none;
//   - deleting a Config or Secret that a workload names is refused (409,
//     listing the users) unless forced; after a forced delete the users'
//     status says ConfigMissing (the aggregator).
//
// There is no separate reference index to keep in step: the bucket is the
// index. The users of a Config are found by reading its project's
// workloads (a project's keys share the prefix "project."), which is what
// a delete and a change of content cost. When a Config or Secret changes,
// the writer rolls its Apps at once (rollUsers); the repair loop, which
// looks at every changed key RepairGrace after its write and at every key
// on start and every RepairEvery, does it again (a no-op when done), so a
// replica that dies between the two writes leaves nothing stale for long.
// A workload written while the Config it names is being deleted may slip
// through the check: it then shows ConfigMissing, as after a forced delete.

// CodeNotFound is the field error code of a reference to a Config, a
// Secret or a key that does not exist.
const CodeNotFound = "NotFound"

// stored is a Config or Secret as a reference sees it: its keys and its
// content version.
type stored struct {
	keys    map[string]bool
	version string
}

// lookupConfig reads the Config or Secret ref names in project; nil when
// there is none.
func (s *Service) lookupConfig(ctx context.Context, project string, ref api.ConfigRef) (*stored, error) {
	e, err := s.workloads.Get(ctx, api.Key(project, ref.Kind, ref.Name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	w, err := api.Decode(e.Value())
	if err != nil {
		return nil, fmt.Errorf("decode stored %s %s/%s: %w", ref.Kind, project, ref.Name, err)
	}
	out := &stored{keys: map[string]bool{}}
	switch spec := w.Spec.(type) {
	case *api.ConfigSpec:
		for k := range spec.Content() {
			out.keys[k] = true
		}
		out.version = spec.ContentHash()
	case *api.SecretSpec:
		for _, k := range spec.Keys {
			out.keys[k] = true
		}
		out.version = spec.Digest
	}
	return out, nil
}

// resolveConfigs checks every reference of w's template and sets an App's
// ConfigVersions (any other kind's are cleared): 422 for a missing Config,
// Secret or key that is not optional.
func (s *Service) resolveConfigs(ctx context.Context, w *api.Workload) *Error {
	if w.Kind == api.KindConfig || w.Kind == api.KindSecret {
		return nil
	}
	t := w.Spec.PodTemplate()
	t.ConfigVersions = nil
	uses := t.Uses("spec.template")
	if len(uses) == 0 {
		return nil
	}
	found := map[string]*stored{}
	var fe api.FieldErrors
	for _, u := range uses {
		st, seen := found[u.Ref.ID()]
		if !seen {
			var err error
			if st, err = s.lookupConfig(ctx, w.Metadata.Project, u.Ref); err != nil {
				return unavailable(err)
			}
			found[u.Ref.ID()] = st
		}
		if u.Ref.Optional {
			continue
		}
		if st == nil {
			fe = append(fe, api.FieldError{Field: u.Field + ".name", Code: CodeNotFound,
				Reason: fmt.Sprintf("%s %q does not exist in project %s", u.Ref.Kind, u.Ref.Name, w.Metadata.Project)})
			continue
		}
		for i, k := range u.Keys {
			if st.keys[k] {
				continue
			}
			f := u.Field + ".key"
			if !strings.HasSuffix(u.Field, ".valueFrom") {
				f = fmt.Sprintf("%s.items[%d].key", u.Field, i)
			}
			fe = append(fe, api.FieldError{Field: f, Code: CodeNotFound, Reason: fmt.Sprintf("%s %q has no key %q", u.Ref.Kind, u.Ref.Name, k)})
		}
	}
	if len(fe) > 0 {
		return invalid(fe)
	}
	if w.Kind == api.KindApp {
		t.ConfigVersions = versions(t, found)
	}
	return nil
}

// versions are an App's ConfigVersions: the version of each Config and
// Secret found that it rolls on.
func versions(t *api.PodTemplate, found map[string]*stored) map[string]string {
	out := map[string]string{}
	for _, r := range t.Refs() {
		if st := found[r.ID()]; st != nil && r.Rollout() {
			out[r.ID()] = st.version
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// users lists the workloads of project that name the Config or Secret
// ref, as "Kind/name", sorted.
func (s *Service) users(ctx context.Context, project string, ref api.ConfigRef) ([]*api.Workload, error) {
	lister, err := s.workloads.ListKeysFiltered(ctx, project+".>")
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var out []*api.Workload
	for _, k := range keys {
		_, kind, _, err := api.ParseKey(k)
		if err != nil || kind == strings.ToLower(api.KindConfig) || kind == strings.ToLower(api.KindSecret) {
			continue
		}
		w, _, err := s.get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(w.Spec.PodTemplate().Refs(), func(r api.ConfigRef) bool { return r.ID() == ref.ID() }) {
			out = append(out, w)
		}
	}
	return out, nil
}

// checkUnused refuses (409) to delete a Config or Secret a workload names,
// listing them.
func (s *Service) checkUnused(ctx context.Context, project string, ref api.ConfigRef) error {
	ws, err := s.users(ctx, project, ref)
	if err != nil {
		return unavailable(err)
	}
	if len(ws) == 0 {
		return nil
	}
	names := make([]string, len(ws))
	for i, w := range ws {
		names[i] = w.Kind + "/" + w.Metadata.Name
	}
	slices.Sort(names)
	return &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "InUse",
		Message: fmt.Sprintf("%s %s is used by %s; change them first, or delete with force (they then show %s)",
			ref.Kind, ref.Name, strings.Join(names, ", "), api.ConditionConfigMissing)}}
}

// rollUsers brings the ConfigVersions of every App of project that names
// the Config or Secret ref up to date with what is stored: each App whose
// versions change gets a new generation, which its rollout carries out.
func (s *Service) rollUsers(ctx context.Context, project string, ref api.ConfigRef) error {
	ws, err := s.users(ctx, project, ref)
	if err != nil {
		return err
	}
	var errs []error
	for _, w := range ws {
		if w.Kind == api.KindApp {
			errs = append(errs, s.refreshVersions(ctx, w.Key(), fmt.Sprintf("%s %s changed", ref.Kind, ref.Name)))
		}
	}
	return errors.Join(errs...)
}

// refreshVersions rewrites the App at key with its ConfigVersions as the
// stored Configs and Secrets give them, when they differ; why is the
// event's message. The version of one that went missing (a forced delete)
// is kept: its pods are not restarted into a missing Config, and the
// status says ConfigMissing.
func (s *Service) refreshVersions(ctx context.Context, key, why string) error {
	var out *api.Workload
	rev, err := bus.Update(ctx, s.workloads, key, func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, bus.ErrNoChange
		}
		w, err := api.Decode(cur)
		if err != nil {
			return nil, fmt.Errorf("decode stored %s: %w", key, err)
		}
		if w.Kind != api.KindApp {
			return nil, bus.ErrNoChange
		}
		t := w.Spec.PodTemplate()
		found := map[string]*stored{}
		for _, r := range t.Refs() {
			if found[r.ID()], err = s.lookupConfig(ctx, w.Metadata.Project, r); err != nil {
				return nil, err
			}
		}
		next := versions(t, found)
		for id, v := range t.ConfigVersions {
			if found[id] == nil && slices.ContainsFunc(t.Refs(), func(r api.ConfigRef) bool { return r.ID() == id && r.Rollout() }) {
				if next == nil {
					next = map[string]string{}
				}
				next[id] = v // gone: the pods keep what they run
			}
		}
		if maps.Equal(next, t.ConfigVersions) {
			return nil, bus.ErrNoChange
		}
		t.ConfigVersions = next
		w.Metadata.Generation++
		w.Metadata.Updated = time.Now().UTC()
		w.Metadata.Event, w.Metadata.EventMessage = api.EventUpdated, why
		out = w
		return json.Marshal(w)
	})
	if errors.Is(err, bus.ErrNoChange) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("roll %s: %w", key, err)
	}
	s.log.Info("rolled for a new config version", "key", key, "generation", out.Metadata.Generation, "why", why)
	s.publish(ctx, out, rev)
	return nil
}

// afterConfigWrite rolls the users of a Config or Secret just written or
// deleted (w); a failure is logged, and the repair loop rolls them.
func (s *Service) afterConfigWrite(ctx context.Context, project, kind, name string) {
	if kind != api.KindConfig && kind != api.KindSecret {
		return
	}
	if err := s.rollUsers(ctx, project, api.ConfigRef{Kind: kind, Name: name}); err != nil {
		s.log.Warn("roll the users of a config, the repair loop will", "project", project, "kind", kind, "name", name, "err", err)
	}
}

// repairConfigUse is the repair loop's part for key: a Config's or
// Secret's users are rolled to its version, an App's versions checked.
func (s *Service) repairConfigUse(ctx context.Context, key string) error {
	project, kind, name, err := api.ParseKey(key)
	if err != nil {
		return nil
	}
	switch kind { // api.ParseKey gives the kind's name, not the key's lower case
	case api.KindConfig, api.KindSecret:
		return s.rollUsers(ctx, project, api.ConfigRef{Kind: kind, Name: name})
	case api.KindApp:
		return s.refreshVersions(ctx, key, "config versions repaired")
	}
	return nil
}
