package gateway

// Node rotation plans in the Compute API (platform admins). The upgrade
// service keeps everything in its bucket (bus.BucketUpgrade): the plan an
// operator writes (plan.<name>), the operator's control (ctl.<name>) and
// the progress only the service writes (p.<name>). The gateway is one
// more operator: PUT validates the plan with the same code the service
// runs (libs/api.RotationSpec, defaults then Validate, every field named)
// and writes plan.<name>; pause, resume and abort change ctl.<name> with
// the bus's one compare-and-set loop (bus.Update), so a control given
// while the service is down waits in the bucket for it, and a resume bumps
// ResumeSeq, which lifts a pause the SLO gate or a node took before it.
// Reads render the three keys into the computeapi shapes: per cluster and
// pool, the wave and the nodes in each state, and the nodes themselves.
// The gateway does not import the service (nor its Kubernetes
// dependencies): the progress is decoded into upgradeProgress below, which
// mirrors the JSON of services/upgrade/plan.Progress (the fields shown).
// Its NATS user writes plan.* and ctl.* only (bus.Grants). Mutations are
// audited on atoll.audit.platform.<verb> (middleware.go: auditVerbs).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
)

// Keys of a plan in bus.BucketUpgrade (services/upgrade SpecKey,
// ControlKey, ProgressKey).
func upgradeSpecKey(name string) string     { return "plan." + name }
func upgradeControlKey(name string) string  { return "ctl." + name }
func upgradeProgressKey(name string) string { return "p." + name }

// upgradeControl mirrors plan.Control.
type upgradeControl struct {
	Pause     bool   `json:"pause,omitempty"`
	Abort     bool   `json:"abort,omitempty"`
	Reason    string `json:"reason,omitempty"`
	ResumeSeq int    `json:"resumeSeq,omitempty"`
}

// upgradeProgress mirrors the fields of plan.Progress the API shows.
type upgradeProgress struct {
	Phase     string                  `json:"phase"`
	Reason    string                  `json:"reason,omitempty"`
	Cluster   int                     `json:"cluster"`
	Pool      int                     `json:"pool"`
	Wave      int                     `json:"wave"`
	SoakUntil time.Time               `json:"soakUntil,omitzero"`
	Nodes     map[string]*upgradeNode `json:"nodes,omitempty"`
	PausedBy  string                  `json:"pausedBy,omitempty"`
	Updated   time.Time               `json:"updated"`
}

// upgradeNode mirrors plan.Node.
type upgradeNode struct {
	UID         string    `json:"uid"`
	Name        string    `json:"name"`
	Cluster     string    `json:"cluster"`
	Pool        string    `json:"pool"`
	State       string    `json:"state"`
	Surge       bool      `json:"surge,omitempty"`
	Replacement string    `json:"replacement,omitempty"`
	Blocked     string    `json:"blocked,omitempty"`
	Forced      bool      `json:"forced,omitempty"`
	Since       time.Time `json:"since"`
	Why         string    `json:"why,omitempty"`
}

// Node states that are over (plan.NodeState.Terminal) and the one that
// counts as rotated.
var upgradeTerminal = []string{"done", "skipped", "rolledback", "gone"}

const upgradeNodeDone = "done"

// Phases of plan.Progress the views test.
const (
	upgradePhaseDone   = "Done"
	upgradePhasePaused = "Paused"
)

func (s *Service) upgradeKV(ctx context.Context) (jetstream.KeyValue, error) {
	return s.bus.KV(ctx, bus.BucketUpgrade)
}

// ListUpgrades lists every plan with its progress per cluster and pool
// (platform admins).
func (s *Service) ListUpgrades(w http.ResponseWriter, r *http.Request) {
	if !platformAdmin(w, r) {
		return
	}
	kv, err := s.upgradeKV(r.Context())
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the region's rotation plans are out of reach; retry", err)
		return
	}
	keys, err := kv.Keys(r.Context())
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the region's rotation plans are out of reach; retry", err)
		return
	}
	var names []string
	for _, k := range keys {
		if n, ok := strings.CutPrefix(k, "plan."); ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	out := computeapi.UpgradeList{Items: []computeapi.Upgrade{}}
	for _, n := range names {
		v, found, err := readUpgrade(r.Context(), kv, n)
		if err != nil {
			writeFailure(w, r, http.StatusInternalServerError, "Internal", "a rotation plan is unreadable", err)
			return
		}
		if found {
			v.Nodes = nil // the list is a summary
			out.Items = append(out.Items, v)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// GetUpgrade answers one plan, its control and its progress (platform
// admins).
func (s *Service) GetUpgrade(w http.ResponseWriter, r *http.Request, name computeapi.UpgradePath) {
	if !platformAdmin(w, r) {
		return
	}
	s.writeUpgrade(w, r, name)
}

// PutUpgrade creates or replaces a plan (platform admins).
func (s *Service) PutUpgrade(w http.ResponseWriter, r *http.Request, name computeapi.UpgradePath) {
	var spec api.RotationSpec
	if !platformAdmin(w, r) || !decodeBody(w, r, &spec) {
		return
	}
	if spec.Name == "" {
		spec.Name = name
	}
	if spec.Name != name {
		writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "the plan's name is not the path's",
			Fields: api.FieldErrors{{Field: "name", Code: api.CodeInvalid, Reason: fmt.Sprintf("must be %q (the path's name) or empty", name)}}}))
		return
	}
	spec.Default()
	if err := spec.Validate(); err != nil {
		var fe api.FieldErrors
		errors.As(err, &fe)
		writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "invalid rotation plan: " + err.Error(), Fields: fe}))
		return
	}
	kv, err := s.upgradeKV(r.Context())
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the region's rotation plans are out of reach; retry", err)
		return
	}
	body, err := json.Marshal(&spec)
	if err != nil {
		writeFailure(w, r, http.StatusInternalServerError, "Internal", "a rotation plan is unreadable", err)
		return
	}
	if _, err := kv.Put(r.Context(), upgradeSpecKey(name), body); err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the region's rotation plans are out of reach; retry", err)
		return
	}
	s.log.Info("rotation plan written", "plan", name, "by", identity(r).Subject)
	s.writeUpgrade(w, r, name)
}

// PauseUpgrade pauses a plan (platform admins).
func (s *Service) PauseUpgrade(w http.ResponseWriter, r *http.Request, name computeapi.UpgradePath) {
	s.upgradeOp(w, r, name, func(c *upgradeControl, reason string) { c.Pause, c.Reason = true, reason })
}

// ResumeUpgrade lifts any pause of a plan given before it, an automatic
// one included (platform admins).
func (s *Service) ResumeUpgrade(w http.ResponseWriter, r *http.Request, name computeapi.UpgradePath) {
	s.upgradeOp(w, r, name, func(c *upgradeControl, _ string) { c.Pause, c.Reason = false, ""; c.ResumeSeq++ })
}

// AbortUpgrade aborts a plan (platform admins).
func (s *Service) AbortUpgrade(w http.ResponseWriter, r *http.Request, name computeapi.UpgradePath) {
	s.upgradeOp(w, r, name, func(c *upgradeControl, reason string) { c.Abort, c.Reason = true, reason })
}

// upgradeOp applies change to the plan's control (the body, optional,
// gives the reason) and answers the plan.
func (s *Service) upgradeOp(w http.ResponseWriter, r *http.Request, name string, change func(*upgradeControl, string)) {
	if !platformAdmin(w, r) {
		return
	}
	var a computeapi.UpgradeAction
	if r.ContentLength != 0 && !decodeBody(w, r, &a) {
		return
	}
	kv, err := s.upgradeKV(r.Context())
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the region's rotation plans are out of reach; retry", err)
		return
	}
	if _, err := kv.Get(r.Context(), upgradeSpecKey(name)); errors.Is(err, jetstream.ErrKeyNotFound) {
		writeError(w, r, http.StatusNotFound, "NotFound", "no rotation plan "+name)
		return
	} else if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the region's rotation plans are out of reach; retry", err)
		return
	}
	reason := a.Reason
	if reason == "" {
		reason = "by " + identity(r).Subject
	} else {
		reason += " (" + identity(r).Subject + ")"
	}
	_, err = bus.Update(r.Context(), kv, upgradeControlKey(name), func(cur []byte, exists bool) ([]byte, error) {
		var c upgradeControl
		if exists && len(cur) > 0 {
			if err := json.Unmarshal(cur, &c); err != nil {
				return nil, fmt.Errorf("unreadable control: %w", err)
			}
		}
		change(&c, reason)
		return json.Marshal(c)
	})
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the region's rotation plans are out of reach; retry", err)
		return
	}
	s.log.Info("rotation plan control", "plan", name, "path", r.URL.Path, "by", identity(r).Subject)
	s.writeUpgrade(w, r, name)
}

func (s *Service) writeUpgrade(w http.ResponseWriter, r *http.Request, name string) {
	kv, err := s.upgradeKV(r.Context())
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "the region's rotation plans are out of reach; retry", err)
		return
	}
	v, found, err := readUpgrade(r.Context(), kv, name)
	switch {
	case err != nil:
		writeFailure(w, r, http.StatusInternalServerError, "Internal", "a rotation plan is unreadable", err)
	case !found:
		writeError(w, r, http.StatusNotFound, "NotFound", "no rotation plan "+name)
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

// readUpgrade reads a plan's three keys; found is false without a plan.
func readUpgrade(ctx context.Context, kv jetstream.KeyValue, name string) (computeapi.Upgrade, bool, error) {
	var (
		v    computeapi.Upgrade
		ctl  upgradeControl
		prog upgradeProgress
	)
	found, err := getUpgradeKey(ctx, kv, upgradeSpecKey(name), &v.Spec)
	if err != nil || !found {
		return v, false, err
	}
	if _, err := getUpgradeKey(ctx, kv, upgradeControlKey(name), &ctl); err != nil {
		return v, false, err
	}
	if _, err := getUpgradeKey(ctx, kv, upgradeProgressKey(name), &prog); err != nil {
		return v, false, err
	}
	return upgradeView(name, v.Spec, ctl, prog), true, nil
}

func getUpgradeKey(ctx context.Context, kv jetstream.KeyValue, key string, v any) (bool, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", key, err)
	}
	b, err := bus.Inflate(e.Value()) // a large plan's progress is gzipped
	if err != nil {
		return false, fmt.Errorf("unreadable %s: %w", key, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("unreadable %s: %w", key, err)
	}
	return true, nil
}

// upgradeView renders a plan: per cluster and pool, whether it is done,
// current or pending, the current pool's wave, and the nodes in each state
// (as the CLI's status does).
func upgradeView(name string, spec computeapi.RotationPlan, ctl upgradeControl, p upgradeProgress) computeapi.Upgrade {
	v := computeapi.Upgrade{
		Name: name, Spec: spec, Phase: p.Phase, Reason: p.Reason, PausedBy: p.PausedBy,
		SoakUntil: p.SoakUntil, Updated: p.Updated,
		Control:  computeapi.UpgradeControl{Pause: ctl.Pause, Abort: ctl.Abort, Reason: ctl.Reason, ResumeSeq: ctl.ResumeSeq},
		Clusters: []computeapi.UpgradeCluster{},
	}
	if v.Phase == "" {
		v.Phase = "NotStarted"
	}
	v.PauseRequested = ctl.Pause && p.Phase != upgradePhasePaused
	done := p.Phase == upgradePhaseDone
	// state is a pool's (pi >= 0) or, with pi -1, a cluster's.
	state := func(ci, pi int) string {
		switch {
		case pi < 0 && !done && ci == p.Cluster:
			return "current"
		case done || ci < p.Cluster || ci == p.Cluster && pi < p.Pool:
			return "done"
		case ci == p.Cluster && pi == p.Pool:
			return "current"
		}
		return "pending"
	}
	for ci, c := range spec.Clusters {
		uc := computeapi.UpgradeCluster{Name: c.Name, State: state(ci, -1), Pools: []computeapi.UpgradePool{}}
		for pi, pool := range c.Pools {
			up := computeapi.UpgradePool{Name: pool.Name, MaxUnavailable: pool.MaxUnavailable, MaxSurge: pool.MaxSurge,
				State: state(ci, pi), Nodes: map[string]int{}}
			if up.State == "current" {
				up.Wave = p.Wave
			}
			for _, n := range p.Nodes {
				if n.Cluster == c.Name && n.Pool == pool.Name {
					up.Nodes[n.State]++
				}
			}
			uc.Pools = append(uc.Pools, up)
		}
		v.Clusters = append(v.Clusters, uc)
	}
	for _, uid := range slices.Sorted(maps.Keys(p.Nodes)) {
		n := p.Nodes[uid]
		if n.State == upgradeNodeDone {
			v.NodesDone++
		} else if n.State != "pending" && !slices.Contains(upgradeTerminal, n.State) {
			v.NodesInFlight++
		}
		v.Nodes = append(v.Nodes, computeapi.UpgradeNode{Uid: n.UID, Name: n.Name, Cluster: n.Cluster, Pool: n.Pool,
			State: n.State, Surge: n.Surge, Replacement: n.Replacement, Blocked: n.Blocked, Forced: n.Forced,
			Since: n.Since, Why: n.Why})
	}
	return v
}
