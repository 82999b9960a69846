package plan

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Phase is a plan's phase.
type Phase string

// Phases.
const (
	PhaseRunning  Phase = "Running"  // a wave is in flight or about to start
	PhaseSoaking  Phase = "Soaking"  // a wave finished; the gate must hold until SoakUntil
	PhaseWaiting  Phase = "Waiting"  // outside every maintenance window
	PhasePaused   Phase = "Paused"   // by an operator, the SLO gate or a node; Reason says which
	PhaseAborting Phase = "Aborting" // rolling back what is in flight
	PhaseAborted  Phase = "Aborted"
	PhaseDone     Phase = "Done"
)

// Progress is a plan's stored progress (one KV key per plan).
type Progress struct {
	Plan   string `json:"plan"`
	Phase  Phase  `json:"phase"`
	Reason string `json:"reason,omitempty"`
	// Cluster and Pool index Spec.Clusters and its Pools.
	Cluster int `json:"cluster"`
	Pool    int `json:"pool"`
	// Wave counts the waves started in the current pool.
	Wave int `json:"wave"`
	// SoakUntil is when the current soak ends.
	SoakUntil time.Time `json:"soakUntil,omitzero"`
	// Nodes are every node the plan has put in a wave, by UID.
	Nodes map[string]*Node `json:"nodes,omitempty"`
	// Touched lists the clusters a wave was started in, in order.
	Touched []string `json:"touched,omitempty"`
	// PausedBy is operator, gate or node while Phase is Paused.
	PausedBy string `json:"pausedBy,omitempty"`
	// ResumeSeq is the Control.ResumeSeq last honoured: an automatic pause
	// (gate, node) is lifted only by a later resume.
	ResumeSeq int `json:"resumeSeq"`
	// Seq counts the events emitted (their idempotency keys).
	Seq     int       `json:"seq"`
	Updated time.Time `json:"updated"`
}

// Control is the operator's word on a plan (its own KV key, so a pause
// given while the service is down waits there for it).
type Control struct {
	Pause  bool   `json:"pause,omitempty"`
	Abort  bool   `json:"abort,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ResumeSeq is bumped by every resume; it lifts an automatic pause
	// (SLO gate, node) taken before it.
	ResumeSeq int `json:"resumeSeq,omitempty"`
}

// PoolNode is a node of the current pool as observed.
type PoolNode struct {
	UID, Name string
	// Version is the node's value of the target label.
	Version string
	Ready   bool
}

// Gate is the SLO gate's reading of the current cluster.
type Gate struct {
	// Breach says why the gate does not hold ("" when it does): the plan
	// pauses.
	Breach string
	// Hold says a breach is being confirmed (it must last a grace period
	// before it pauses the plan): nothing new starts meanwhile and a soak
	// does not end.
	Hold string
}

// Event is something that happened to the plan, published on
// atoll.cluster.<cluster>.<Name>.
type Event struct {
	Cluster, Name, Message string
}

// Event names.
const (
	EvWaveStarted  = "upgrade-wave-started"
	EvWaveSoaking  = "upgrade-wave-soaking"
	EvPoolDone     = "upgrade-pool-done"
	EvClusterDone  = "upgrade-cluster-done"
	EvPaused       = "upgrade-paused"
	EvResumed      = "upgrade-resumed"
	EvAborted      = "upgrade-aborted"
	EvPlanDone     = "upgrade-done"
	EvNodeRotated  = "upgrade-node-rotated"
	EvNodeSkipped  = "upgrade-node-skipped"
	EvWindowClosed = "upgrade-window-closed"
)

// Who paused a plan (Progress.PausedBy).
const (
	ByOperator = "operator"
	ByGate     = "gate"
	ByNode     = "node"
)

// Pause pauses p (by gate or node) for why; only a resume given after it
// lifts it.
func Pause(p *Progress, by, why string, ctl Control) {
	p.Phase, p.PausedBy, p.Reason, p.ResumeSeq = PhasePaused, by, why, ctl.ResumeSeq
}

// CurrentCluster is the name of the cluster being rotated, "" when done.
func (p *Progress) CurrentCluster(s *Spec) string {
	if p.Cluster >= len(s.Clusters) {
		return ""
	}
	return s.Clusters[p.Cluster].Name
}

// InFlight are the started, non-terminal nodes, by UID order.
func (p *Progress) InFlight() []*Node {
	var out []*Node
	for _, uid := range slices.Sorted(maps.Keys(p.Nodes)) {
		if n := p.Nodes[uid]; n.State.Started() && !n.State.Terminal() {
			out = append(out, n)
		}
	}
	return out
}

// Pending are the nodes of the current wave not started yet.
func (p *Progress) Pending() []*Node {
	var out []*Node
	for _, uid := range slices.Sorted(maps.Keys(p.Nodes)) {
		if n := p.Nodes[uid]; n.State == NodePending {
			out = append(out, n)
		}
	}
	return out
}

// Advance moves the plan given the operator's control, the current
// pool's nodes (every node of Spec.Clusters[p.Cluster].Pools[p.Pool]), the
// gate and now. It returns the progress to store (p is not changed), the
// pending nodes that may start now (the caller acquires their leases and
// marks them leased; a refused lease leaves a node pending) and the
// events. Whether rollback applies to the in-flight nodes is Rollback(p).
func Advance(s *Spec, p Progress, ctl Control, pool []PoolNode, gate Gate, now time.Time) (Progress, []*Node, []Event) {
	p = clone(p)
	if p.Nodes == nil {
		p.Nodes = map[string]*Node{}
	}
	if p.Phase == "" {
		p.Phase = PhaseRunning
	}
	p.Updated = now
	var evs []Event
	emit := func(name, msg string) {
		evs = append(evs, Event{Cluster: p.CurrentCluster(s), Name: name, Message: msg})
	}
	switch p.Phase {
	case PhaseDone, PhaseAborted:
		return p, nil, nil
	}
	if ctl.Abort && p.Phase != PhaseAborting {
		p.Phase, p.Reason = PhaseAborting, "aborted by an operator"
		if ctl.Reason != "" {
			p.Reason += ": " + ctl.Reason
		}
	}
	if p.Phase == PhaseAborting {
		// Not-started nodes leave the wave; the in-flight ones roll back
		// (Rollback) or finish; then the plan is aborted.
		for uid, n := range p.Nodes {
			if n.State == NodePending {
				delete(p.Nodes, uid)
			}
		}
		if len(p.InFlight()) == 0 {
			p.Phase = PhaseAborted
			emit(EvAborted, p.Reason)
		}
		return p, nil, evs
	}
	if ctl.Pause && !(p.Phase == PhasePaused && p.PausedBy == ByOperator) {
		why := "paused by an operator"
		if ctl.Reason != "" {
			why += ": " + ctl.Reason
		}
		p.Phase, p.PausedBy, p.Reason, p.ResumeSeq = PhasePaused, ByOperator, why, ctl.ResumeSeq
		emit(EvPaused, p.Reason)
	}
	if p.Phase == PhasePaused {
		// An operator's pause holds while Control.Pause does; an automatic
		// one until a resume given after it.
		if ctl.Pause || p.PausedBy != ByOperator && ctl.ResumeSeq <= p.ResumeSeq {
			return p, nil, evs
		}
		p.Phase, p.PausedBy, p.Reason, p.ResumeSeq = PhaseRunning, "", "", ctl.ResumeSeq
		p.SoakUntil = time.Time{}
		// Rolled-back nodes are back in the pool's to-do list.
		for uid, n := range p.Nodes {
			if n.State == NodeRolled {
				delete(p.Nodes, uid)
			}
		}
		emit(EvResumed, "")
	}
	if gate.Breach != "" {
		Pause(&p, ByGate, "SLO gate: "+gate.Breach, ctl)
		emit(EvPaused, p.Reason)
		return p, nil, evs
	}
	if p.Cluster >= len(s.Clusters) {
		p.Phase = PhaseDone
		return p, nil, evs
	}
	if gate.Hold != "" {
		p.Reason = "held: " + gate.Hold
		return p, nil, evs
	}
	inFlight := len(p.InFlight())
	pending := p.Pending()
	open := InWindow(s.Windows, now)
	if inFlight > 0 || len(pending) > 0 {
		if len(pending) > 0 && !open {
			// Finish what started; the rest of the wave waits.
			if p.Phase != PhaseWaiting && inFlight == 0 {
				p.Phase, p.Reason = PhaseWaiting, "outside every maintenance window"
				emit(EvWindowClosed, fmt.Sprintf("%d nodes of wave %d wait", len(pending), p.Wave))
			}
			return p, nil, evs
		}
		p.Phase, p.Reason = PhaseRunning, ""
		return p, pending, evs
	}
	// The wave (if any) is over: soak, then the next wave.
	if p.Wave > 0 && p.SoakUntil.IsZero() && s.Soak.Duration > 0 {
		p.Phase, p.SoakUntil = PhaseSoaking, now.Add(s.Soak.Duration)
		emit(EvWaveSoaking, fmt.Sprintf("wave %d soaks until %s", p.Wave, p.SoakUntil.Format(time.RFC3339)))
		return p, nil, evs
	}
	if !p.SoakUntil.IsZero() && now.Before(p.SoakUntil) {
		return p, nil, evs
	}
	c := s.Clusters[p.Cluster]
	ps := c.Pools[p.Pool]
	done := map[string]bool{}
	for uid, n := range p.Nodes {
		if n.State.Terminal() {
			done[uid] = true
		}
	}
	var todo []PoolNode
	for _, n := range pool {
		if n.Version != s.Target.Value && !done[n.UID] {
			todo = append(todo, n)
		}
	}
	if len(todo) == 0 {
		emit(EvPoolDone, ps.Name)
		p.Pool, p.Wave, p.SoakUntil = p.Pool+1, 0, time.Time{}
		if p.Pool >= len(c.Pools) {
			emit(EvClusterDone, c.Name)
			p.Cluster, p.Pool = p.Cluster+1, 0
			if p.Cluster >= len(s.Clusters) {
				p.Phase, p.Reason = PhaseDone, ""
				evs = append(evs, Event{Cluster: c.Name, Name: EvPlanDone, Message: s.Target.Label + "=" + s.Target.Value})
			}
		}
		p.Phase = map[bool]Phase{true: PhaseDone, false: PhaseRunning}[p.Phase == PhaseDone]
		return p, nil, evs
	}
	if !open {
		if p.Phase != PhaseWaiting {
			p.Phase, p.Reason = PhaseWaiting, "outside every maintenance window"
			emit(EvWindowClosed, "next wave waits")
		}
		return p, nil, evs
	}
	wave := WaveOf(ps, len(pool), todo)
	p.Wave++
	p.SoakUntil = time.Time{}
	p.Phase, p.Reason = PhaseRunning, ""
	if !slices.Contains(p.Touched, c.Name) {
		p.Touched = append(p.Touched, c.Name)
	}
	var started []*Node
	for _, w := range wave {
		n := &Node{UID: w.UID, Name: w.Name, Cluster: c.Name, Pool: ps.Name, State: NodePending, Surge: w.Surge, Since: now}
		p.Nodes[w.UID] = n
		started = append(started, n)
	}
	emit(EvWaveStarted, fmt.Sprintf("pool %s wave %d: %d nodes", ps.Name, p.Wave, len(wave)))
	return p, started, evs
}

// WaveMember is a node chosen for a wave.
type WaveMember struct {
	PoolNode
	Surge bool
}

// WaveOf picks the next wave among todo (nodes not on the target yet, in
// a pool of total nodes): NotReady nodes first (they are unavailable
// already), then by name; MaxSurge + MaxUnavailable of them, the first
// MaxSurge surged. A pool of one node is surged.
func WaveOf(ps PoolStep, total int, todo []PoolNode) []WaveMember {
	u, _ := MaxUnavailable(ps.MaxUnavailable, total)
	sg, _ := MaxSurge(ps.MaxSurge, total)
	if total == 1 {
		u, sg = 0, 1
	}
	todo = slices.Clone(todo)
	slices.SortFunc(todo, func(a, b PoolNode) int {
		if a.Ready != b.Ready {
			if !a.Ready {
				return -1
			}
			return 1
		}
		return cmpString(a.Name, b.Name)
	})
	var out []WaveMember
	for i, n := range todo {
		if i >= u+sg {
			break
		}
		out = append(out, WaveMember{PoolNode: n, Surge: i < sg})
	}
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Rollback reports whether in-flight nodes whose drain has not finished
// roll back: the plan is aborting, or the SLO gate paused it, with
// rollback policy uncordon.
func Rollback(s *Spec, p Progress) bool {
	if s.Rollback == RollbackNone {
		return false
	}
	return p.Phase == PhaseAborting || p.Phase == PhasePaused && p.PausedBy == ByGate
}

func clone(p Progress) Progress {
	q := p
	q.Touched = slices.Clone(p.Touched)
	if p.Nodes != nil {
		q.Nodes = make(map[string]*Node, len(p.Nodes))
		for k, v := range p.Nodes {
			c := *v
			c.Evicted = slices.Clone(v.Evicted)
			q.Nodes[k] = &c
		}
	}
	return q
}
