package plan

import "time"

// NodeState is where a node is in its rotation.
type NodeState string

// Node states, in order. Pending nodes are in the current wave but not
// started (no lease yet); every other non-terminal state is in flight.
const (
	NodePending  NodeState = "pending"
	NodeLeased   NodeState = "leased"   // the ledger lease is held
	NodeSurging  NodeState = "surging"  // the replacement is being created ahead
	NodeCordoned NodeState = "cordoned" // recorded before the cordon call
	NodeDraining NodeState = "draining" // drain passes running
	NodeReplaced NodeState = "replaced" // recorded before the provider's Replace
	NodeDone     NodeState = "done"     // replacement Ready, workloads back
	NodeSkipped  NodeState = "skipped"  // drain deadline with policy skip: uncordoned
	NodeRolled   NodeState = "rolledback"
	NodeGone     NodeState = "gone" // deleted by someone else before it was cordoned
)

// Terminal reports whether nothing more happens to a node in s.
func (s NodeState) Terminal() bool {
	return s == NodeDone || s == NodeSkipped || s == NodeRolled || s == NodeGone
}

// Started reports whether a node in s has left pending.
func (s NodeState) Started() bool { return s != NodePending && s != "" }

// drained reports whether s is past its drain.
func (s NodeState) drained() bool { return s == NodeReplaced || s == NodeDone }

// Node is one node's stored progress, keyed by its UID in Progress.Nodes.
type Node struct {
	UID     string    `json:"uid"`
	Name    string    `json:"name"`
	Cluster string    `json:"cluster"`
	Pool    string    `json:"pool"`
	State   NodeState `json:"state"`
	// Surge says the replacement is created (and Ready) before the cordon.
	Surge bool `json:"surge,omitempty"`
	// Replacement is the new node's name, recorded before it is created.
	Replacement string `json:"replacement,omitempty"`
	// Cordoned says this service cordoned the node (it uncordons only those).
	Cordoned bool `json:"cordoned,omitempty"`
	// Evicted are the pods evicted so far (UIDs), never evicted again.
	Evicted []string `json:"evicted,omitempty"`
	// Blocked names the PodDisruptionBudget that refused the last pass.
	Blocked string `json:"blocked,omitempty"`
	// Forced says the drain deadline passed with policy force.
	Forced bool `json:"forced,omitempty"`
	// Since is when the node entered State.
	Since time.Time `json:"since"`
	// DrainStarted is when the first drain pass ran.
	DrainStarted time.Time `json:"drainStarted,omitzero"`
	// Why explains a skip, a rollback or a wait.
	Why string `json:"why,omitempty"`
}

// Observed is what the service sees of a node and its replacement now.
type Observed struct {
	// Exists: the node (by UID) is still in the cluster.
	Exists bool
	// Unschedulable: the node is cordoned.
	Unschedulable bool
	// ReplacementReady: the node named Replacement exists and is Ready.
	ReplacementReady bool
	// Drained: the last drain pass found nothing evictable left.
	Drained bool
	// WorkloadsAvailable: no pod of the node's workloads is pending (every
	// App the node ran is back to its desired ready count).
	WorkloadsAvailable bool
}

// Action is the one side effect Step asks for, performed after the
// returned Node is stored.
type Action string

// Actions.
const (
	ActNone     Action = ""
	ActAcquire  Action = "acquire"  // take the ledger lease (idempotent for the owner)
	ActSurge    Action = "surge"    // create Replacement without deleting the node
	ActCordon   Action = "cordon"   // only issued while the node is schedulable
	ActDrain    Action = "drain"    // one pass through the Eviction API (Evicted skipped)
	ActForce    Action = "force"    // one pass deleting what budgets protect
	ActReplace  Action = "replace"  // provider Replace (create Replacement, delete node)
	ActUncordon Action = "uncordon" // only nodes this service cordoned
	ActRelease  Action = "release"  // release the ledger lease
	ActPause    Action = "pause"    // pause the plan with Node.Why
)

// Step moves n one step given what is observed, the plan's spec and now;
// it returns the node to store and the action to perform after storing.
// rollback asks to roll n back if its drain has not finished. Step never
// asks to cordon a cordoned node, to evict a recorded pod again or to
// uncordon a node it did not cordon.
func Step(s *Spec, n Node, o Observed, rollback bool, now time.Time) (Node, Action) {
	to := func(st NodeState, why string) Node {
		m := n
		m.State, m.Since, m.Why = st, now, why
		return m
	}
	if n.State.Terminal() || n.State == NodePending || n.State == "" {
		if n.State.Terminal() {
			return n, ActRelease
		}
		return n, ActNone
	}
	if rollback && !n.State.drained() {
		m := to(NodeRolled, "rolled back before its drain finished")
		// A cordon this service issued is taken back even when the node
		// looks schedulable: a cordon call that timed out may still land
		// (a frozen API server applies it when it resumes), and the node
		// would stay cordoned with no plan to uncordon it. The uncordon
		// of a schedulable node only clears this service's annotation.
		if n.Cordoned && o.Exists {
			return m, ActUncordon
		}
		return m, ActRelease
	}
	if !o.Exists && !n.State.drained() && n.State != NodeDraining {
		return to(NodeGone, "node deleted by someone else"), ActRelease
	}
	switch n.State {
	case NodeLeased:
		if n.Surge {
			return to(NodeSurging, ""), ActSurge
		}
		m := to(NodeCordoned, "")
		m.Cordoned = !o.Unschedulable
		if o.Unschedulable {
			return m, ActNone
		}
		return m, ActCordon
	case NodeSurging:
		if !o.ReplacementReady {
			if now.Sub(n.Since) > s.ReadyTimeout.Duration {
				return n, ActPause
			}
			return n, ActSurge // idempotent: creates it unless it exists
		}
		m := to(NodeCordoned, "")
		m.Cordoned = !o.Unschedulable
		if o.Unschedulable {
			return m, ActNone
		}
		return m, ActCordon
	case NodeCordoned:
		if !o.Unschedulable && n.Cordoned {
			// Recorded, then the cordon call did not happen (crash): issue it.
			return n, ActCordon
		}
		m := to(NodeDraining, "")
		m.DrainStarted = now
		return m, ActDrain
	case NodeDraining:
		if !o.Exists || o.Drained {
			return to(NodeReplaced, ""), ActReplace
		}
		if n.Forced {
			return n, ActForce
		}
		if now.Sub(n.DrainStarted) < s.DrainDeadline.Duration {
			return n, ActDrain
		}
		switch s.DrainPolicy {
		case DrainForce:
			m := n
			m.Forced, m.Why = true, "drain deadline passed: forcing"
			return m, ActForce
		case DrainSkip:
			m := to(NodeSkipped, "drain deadline passed, blocked by "+blocked(n))
			if n.Cordoned && o.Unschedulable {
				return m, ActUncordon
			}
			return m, ActRelease
		default:
			// The node stays cordoned and its drain goes on; the deadline
			// restarts, so a resumed plan gives it another one.
			m := n
			m.Why = "drain deadline passed, blocked by " + blocked(n)
			m.DrainStarted = now
			return m, ActPause
		}
	case NodeReplaced:
		if o.Exists {
			return n, ActReplace // idempotent: finds the node it made
		}
		if !o.ReplacementReady {
			if now.Sub(n.Since) > s.ReadyTimeout.Duration {
				m := n
				m.Why = "replacement " + n.Replacement + " not Ready in time"
				return m, ActPause
			}
			return n, ActNone
		}
		if !o.WorkloadsAvailable {
			return n, ActNone
		}
		return to(NodeDone, ""), ActRelease
	}
	return n, ActNone
}

func blocked(n Node) string {
	if n.Blocked == "" {
		return "pods that would not go"
	}
	return "PodDisruptionBudget " + n.Blocked
}
