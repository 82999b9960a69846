package gateway

// The platform's managed sidecars in the Compute API (platform admins).
// They are versioned platform configuration (libs/api sidecars.go) in
// bus.BucketSidecars, which the gateway alone writes: a set is validated
// and stored as the next version, under its own key (created, never
// replaced) and as the current one (compare-and-set, so two admins
// setting at once get two versions, in order). Admission mirrors the
// current version and injects it; the status is read from the cache,
// where every workload names the version it runs.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/cache"
)

func (s *Service) sidecarsKV(ctx context.Context) (jetstream.KeyValue, error) {
	return s.bus.KV(ctx, bus.BucketSidecars)
}

// GetSidecars answers the current version of the managed sidecars.
func (s *Service) GetSidecars(w http.ResponseWriter, r *http.Request) {
	if !platformAdmin(w, r) {
		return
	}
	v, err := s.currentSidecars(r.Context())
	switch {
	case err != nil:
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the managed sidecars are out of reach; retry", err)
	case v == nil:
		writeError(w, r, http.StatusNotFound, "NotFound", "no version of the managed sidecars was set: admission injects its own configuration")
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

// currentSidecars reads the current version; nil when none was set.
func (s *Service) currentSidecars(ctx context.Context) (*api.SidecarVersion, error) {
	kv, err := s.sidecarsKV(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, api.SidecarCurrentKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var v api.SidecarVersion
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", api.SidecarCurrentKey, err)
	}
	return &v, nil
}

// SetSidecars stores a new version of the managed sidecars.
func (s *Service) SetSidecars(w http.ResponseWriter, r *http.Request) {
	var spec api.SidecarSpec
	if !platformAdmin(w, r) || !decodeBody(w, r, &spec) {
		return
	}
	spec.Default()
	if fe := validSidecars(&spec); len(fe) > 0 {
		writeInvalid(w, r, fe)
		return
	}
	v, err := s.setSidecars(r.Context(), spec, identity(r).Subject)
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the managed sidecars are out of reach; retry", err)
		return
	}
	s.log.Info("managed sidecars set", "version", v.Version, "by", v.CreatedBy)
	writeJSON(w, http.StatusCreated, v)
}

// validSidecars returns the problems of spec: its own (names, kinds,
// projects, rollout) and each sidecar's container's as a workload's
// container is checked (image reference, environment, ports, resources),
// since admission injects it into every workload it applies to. A field
// both name is reported once.
func validSidecars(spec *api.SidecarSpec) api.FieldErrors {
	fe := spec.Validate()
	seen := map[string]bool{}
	for _, e := range fe {
		seen[e.Field] = true
	}
	for i := range spec.Sidecars {
		for _, e := range spec.Sidecars[i].Validate(fmt.Sprintf("sidecars[%d]", i)) {
			if !seen[e.Field] {
				seen[e.Field] = true
				fe = append(fe, e)
			}
		}
	}
	return fe
}

// setSidecars writes spec as the next version: its own key first (a
// create, so a version number is taken once), then the current key,
// moved forward by compare-and-set. A lost race for the number takes the
// next one.
func (s *Service) setSidecars(ctx context.Context, spec api.SidecarSpec, by string) (*api.SidecarVersion, error) {
	kv, err := s.sidecarsKV(ctx)
	if err != nil {
		return nil, err
	}
	for range 20 {
		cur, err := s.currentSidecars(ctx)
		if err != nil {
			return nil, err
		}
		v := &api.SidecarVersion{Version: 1, SidecarSpec: spec, Created: time.Now().UTC(), CreatedBy: by}
		if cur != nil {
			v.Version = cur.Version + 1
		}
		doc, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		if _, err := kv.Create(ctx, api.SidecarVersionKey(v.Version), doc); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				// Another writer took the number; it moves current on
				// (or its request died: take over its move).
				if err := s.advanceCurrent(ctx, kv, v.Version); err != nil {
					return nil, err
				}
				continue
			}
			return nil, fmt.Errorf("create %s: %w", api.SidecarVersionKey(v.Version), err)
		}
		if err := s.advanceCurrent(ctx, kv, v.Version); err != nil {
			return nil, err
		}
		return v, nil
	}
	return nil, errors.New("set the managed sidecars: too many concurrent versions")
}

// advanceCurrent makes version n (stored under its key) the current one
// unless a newer one already is.
func (s *Service) advanceCurrent(ctx context.Context, kv jetstream.KeyValue, n int64) error {
	e, err := kv.Get(ctx, api.SidecarVersionKey(n))
	if err != nil {
		return fmt.Errorf("read %s: %w", api.SidecarVersionKey(n), err)
	}
	doc := e.Value()
	_, err = bus.Update(ctx, kv, api.SidecarCurrentKey, func(cur []byte, exists bool) ([]byte, error) {
		if exists {
			var c api.SidecarVersion
			if err := json.Unmarshal(cur, &c); err == nil && c.Version >= n {
				return nil, bus.ErrNoChange
			}
		}
		return doc, nil
	})
	if err != nil && !errors.Is(err, bus.ErrNoChange) {
		return fmt.Errorf("set %s: %w", api.SidecarCurrentKey, err)
	}
	return nil
}

// ListSidecarVersions answers every version, newest first.
func (s *Service) ListSidecarVersions(w http.ResponseWriter, r *http.Request) {
	if !platformAdmin(w, r) {
		return
	}
	out, err := s.sidecarHistory(r.Context())
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the managed sidecars are out of reach; retry", err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Items []api.SidecarVersion `json:"items"`
	}{out})
}

func (s *Service) sidecarHistory(ctx context.Context) ([]api.SidecarVersion, error) {
	kv, err := s.sidecarsKV(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := kv.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, err
	}
	var ns []int64
	for _, k := range keys {
		if n, ok := api.SidecarVersionOfKey(k); ok {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	slices.Reverse(ns)
	out := []api.SidecarVersion{}
	for _, n := range ns {
		e, err := kv.Get(ctx, api.SidecarVersionKey(n))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var v api.SidecarVersion
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			return nil, fmt.Errorf("decode %s: %w", api.SidecarVersionKey(n), err)
		}
		out = append(out, v)
	}
	return out, nil
}

// GetSidecarStatus answers which version each workload runs (a count
// per version, the workloads behind the current one), the operators'
// control and the rollout's progress.
func (s *Service) GetSidecarStatus(w http.ResponseWriter, r *http.Request) {
	if !platformAdmin(w, r) {
		return
	}
	s.writeSidecarStatus(w, r)
}

func (s *Service) writeSidecarStatus(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	unavailable := func(err error) {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the managed sidecars are out of reach; retry", err)
	}
	cur, err := s.currentSidecars(ctx)
	if err != nil {
		unavailable(err)
		return
	}
	var current int64
	if cur != nil {
		current = cur.Version
	}
	out, err := sidecarStatus(ctx, s.cache, current)
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the gateway is still reading the region's workloads; retry", err)
		return
	}
	kv, err := s.sidecarsKV(ctx)
	if err != nil {
		unavailable(err)
		return
	}
	// The control and the progress are rendered through their JSON: the
	// API's shapes mirror api.SidecarControl and api.SidecarProgress.
	for key, into := range map[string]any{api.SidecarControlKey: &out.Control, api.SidecarProgressKey: &out.Rollout} {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			unavailable(err)
			return
		}
		if err := json.Unmarshal(e.Value(), into); err != nil {
			writeFailure(w, r, http.StatusInternalServerError, "Internal", "the sidecar rollout's state is unreadable", err)
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// PauseSidecars pauses the sidecar rollout.
func (s *Service) PauseSidecars(w http.ResponseWriter, r *http.Request) {
	s.sidecarOp(w, r, func(c *api.SidecarControl, _ int64, reason string) { c.Paused, c.Reason = true, reason })
}

// ResumeSidecars lifts any pause of the sidecar rollout, the health
// gate's included.
func (s *Service) ResumeSidecars(w http.ResponseWriter, r *http.Request) {
	s.sidecarOp(w, r, func(c *api.SidecarControl, _ int64, _ string) { c.Paused, c.Reason = false, ""; c.ResumeSeq++ })
}

// AbortSidecars aborts the rollout of the current version.
func (s *Service) AbortSidecars(w http.ResponseWriter, r *http.Request) {
	s.sidecarOp(w, r, func(c *api.SidecarControl, current int64, reason string) { c.Aborted, c.Reason = current, reason })
}

// sidecarOp applies change to the rollout's control (the body, optional,
// gives the reason) and answers the status.
func (s *Service) sidecarOp(w http.ResponseWriter, r *http.Request, change func(c *api.SidecarControl, current int64, reason string)) {
	if !platformAdmin(w, r) {
		return
	}
	var a computeapi.UpgradeAction
	if r.ContentLength != 0 && !decodeBody(w, r, &a) {
		return
	}
	ctx := r.Context()
	cur, err := s.currentSidecars(ctx)
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the managed sidecars are out of reach; retry", err)
		return
	}
	if cur == nil {
		writeError(w, r, http.StatusNotFound, "NotFound", "no version of the managed sidecars was set: nothing rolls out")
		return
	}
	kv, err := s.sidecarsKV(ctx)
	if err == nil {
		_, err = bus.Update(ctx, kv, api.SidecarControlKey, func(b []byte, exists bool) ([]byte, error) {
			var c api.SidecarControl
			if exists {
				if err := json.Unmarshal(b, &c); err != nil {
					return nil, err
				}
			}
			change(&c, cur.Version, a.Reason)
			return json.Marshal(c)
		})
	}
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the managed sidecars are out of reach; retry", err)
		return
	}
	s.writeSidecarStatus(w, r)
}

// sidecarStatus folds the cached workloads (those that run pods) into the
// status of version current.
func sidecarStatus(ctx context.Context, c *cache.Cache, current int64) (computeapi.SidecarStatus, error) {
	out := computeapi.SidecarStatus{Current: current}
	count := map[int64]int{}
	projects, err := c.Projects(ctx) // waits for the fill: the lists below are the cache's
	if err != nil {
		return out, err
	}
	for _, p := range projects {
		items, _, err := c.List(ctx, p, cache.Filter{}, "", c.Len()+1)
		if err != nil {
			return out, err
		}
		for _, it := range items {
			if k, ok := api.LookupKind(it.Kind); !ok || k.NoPods {
				continue
			}
			count[it.SidecarVersion]++
			if it.SidecarVersion != current {
				out.Behind = append(out.Behind, struct {
					Kind    string `json:"kind"`
					Name    string `json:"name"`
					Project string `json:"project"`
					Version int64  `json:"version"`
				}{it.Kind, it.Name, it.Project, it.SidecarVersion})
			}
		}
	}
	for _, v := range slices.Sorted(maps.Keys(count)) {
		out.Versions = append(out.Versions, struct {
			Version   int64 `json:"version"`
			Workloads int   `json:"workloads"`
		}{v, count[v]})
	}
	if out.Behind == nil {
		out.Behind = []struct {
			Kind    string `json:"kind"`
			Name    string `json:"name"`
			Project string `json:"project"`
			Version int64  `json:"version"`
		}{}
	}
	if out.Versions == nil {
		out.Versions = []struct {
			Version   int64 `json:"version"`
			Workloads int   `json:"workloads"`
		}{}
	}
	return out, nil
}
