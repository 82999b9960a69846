// Package plan is the upgrade service's pure core: the rotation plan
// (Spec), its validation, the rounding of wave sizes, maintenance windows
// with time zones, the stored progress of a plan (Progress) and the two
// decision functions the service runs on every tick:
//
//   - Advance (wave.go) moves the plan: which cluster, pool and wave is
//     current, which nodes start now, when a wave soaks, when the SLO gate
//     or an operator pauses it, when it is done or aborted.
//   - Step (node.go) moves one node through lease, surge, cordon, drain,
//     replace and wait, returning the single side effect to perform next.
//
// Both are functions of (spec, stored progress, observations, now): no
// clock, no I/O, so they are table-tested with fixed times. The service
// writes the progress they return BEFORE it performs the side effect they
// name (record, then act), and every side effect is idempotent given the
// record (a cordon is issued only on a schedulable node, a drain pass
// skips the pods it evicted before and pods already terminating, a
// replacement's name is recorded before the provider is called), which is
// what lets a standby resume a plan exactly where a dead leader left it.
//
// # Rounding
//
// A pool's wave may take MaxUnavailable nodes out of service and create
// MaxSurge replacements ahead of the nodes they replace. Both are counts
// ("2") or percentages of the pool's nodes ("25%"): max unavailable rounds
// DOWN but never below one (as libs/disruption's budgets and Cluster
// API's health checks do), max surge rounds UP (as Kubernetes' rolling
// updates do). A wave is MaxUnavailable + MaxSurge nodes; its first
// MaxSurge nodes are surged (replacement Ready before the cordon), so at
// most MaxUnavailable nodes are unavailable at once. A pool of one node
// is always surged: its only node is never drained first.
//
// # Windows
//
// A Window is days of the week, a start and an end (HH:MM) in a time
// zone; an end before the start spans midnight and belongs to the day it
// starts. With windows set, a wave never starts outside one and no node
// of a wave starts outside one; when a window closes mid-wave, the nodes
// already started finish (a half-drained node is worse than a finished
// one) and the wave's other nodes wait for the next window.
//
// # Pause, resume, abort, rollback
//
// An operator's Control is read every tick. Pause starts no new node;
// nodes past their lease finish (the same finish rule as a window). The
// SLO gate (a breach: pause; a breach being confirmed: Hold, nothing new
// starts and no soak ends) and a node (drain deadline with policy pause,
// a replacement never Ready) pause a plan on their own; any pause is
// lifted by a resume given after it (Control.ResumeSeq), and a resumed
// plan soaks again before its next wave. A gate pause with rollback
// uncordon rolls back the in-flight nodes whose drain has not finished
// (uncordoned if this service cordoned them, released); they are rotated
// again after a resume. Abort rolls back the same way and ends the plan.
package plan

import (
	"time"

	"atoll.dev/libs/api"
)

// The plan's shape, defaults, validation, rounding and windows live in
// libs/api (rotation.go) so the gateway validates plans as this package
// does without importing the service; these names alias them.

// Drain deadline policies (api.DrainSkip...).
const (
	DrainSkip  = api.DrainSkip
	DrainForce = api.DrainForce
	DrainPause = api.DrainPause
)

// Rollback policies (api.RollbackUncordon...).
const (
	RollbackUncordon = api.RollbackUncordon
	RollbackNone     = api.RollbackNone
)

type (
	// Duration is a time.Duration written as a Go duration string ("30s").
	Duration = api.RotationDuration
	// Spec is a rotation plan.
	Spec = api.RotationSpec
	// Target is the node label a rotation sets.
	Target = api.RotationTarget
	// ClusterStep is one member cluster of a plan and its pools in order.
	ClusterStep = api.RotationCluster
	// PoolStep is one node pool (label atoll.dev/pool) and its wave shape.
	PoolStep = api.RotationPool
	// Window is a recurring maintenance window.
	Window = api.RotationWindow
)

// MaxUnavailable is how many of a pool's total nodes a wave may take out
// of service at once (api.RotationMaxUnavailable).
func MaxUnavailable(s string, total int) (int, error) { return api.RotationMaxUnavailable(s, total) }

// MaxSurge is how many replacements a wave may create ahead of the nodes
// they replace (api.RotationMaxSurge).
func MaxSurge(s string, total int) (int, error) { return api.RotationMaxSurge(s, total) }

// InWindow reports whether t is inside one of windows; no windows means
// always.
func InWindow(windows []Window, t time.Time) bool { return api.RotationInWindow(windows, t) }
