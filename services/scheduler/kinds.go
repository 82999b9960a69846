package scheduler

import (
	"context"
	"maps"
	"slices"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// kindHooks is what a placed kind provides to the scheduler: how the pure
// decision divides it over the candidates (DecideWith), and what it adds to
// the phases of a reconcile (Service.reconcile). Each kind's hooks live in its
// own file, kind_<kind>.go.
type kindHooks interface {
	// divide splits w over its candidates, best first. No shards makes
	// the decision unschedulable.
	divide(w *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard
	// gate runs first in the gate phase; done ends the reconcile there
	// (the kind handled it, err being its outcome).
	gate(ctx context.Context, s *Service, t *term, r *recon) (done bool, err error)
	// stands says whether prev still stands for w on snap, beyond the
	// rule every kind follows (same generation, placed, clusters healthy).
	stands(s *Service, prev *api.PlacementDecision, w *api.Workload, snap []*api.ClusterInfo) bool
	// afterDecide refines the decision d made for r (held under the
	// term's decide lock): it returns the decision to keep.
	afterDecide(s *Service, t *term, r *recon, d api.PlacementDecision) api.PlacementDecision
	// announce sends the kind's own events of placement d at rev, before
	// the placement's event: published when this reconcile has just
	// written d, ensured otherwise.
	announce(ctx context.Context, s *Service, w *api.Workload, d *api.PlacementDecision, rev uint64, written bool) error
	// finishes says whether the kind runs to completion: a finished
	// workload's placement stays, so a lost cluster does not run it again.
	finishes() bool
	// replays says whether the replay queue may settle a key whose
	// placement stands by announcing it; one that may not goes to the
	// work queue (a gang's timers run there).
	replays() bool
}

// kindTable is the scheduler's kinds by name.
type kindTable map[string]kindHooks

// kinds is the scheduler's table of kinds: one entry per kind that
// api.PlacedKindNames lists (TestKindTableMatchesTheAPI fails until a new
// one is added here). A kind registered Unplaced (a Scaler, a policy
// another service acts on) has no entry: the read phase leaves it alone.
func kinds() kindTable {
	return kindTable{
		api.KindApp:         appKind{},
		api.KindJobSet:      jobSetKind{},
		api.KindPod:         podKind{},
		api.KindCronJob:     cronJobKind{},
		api.KindDaemon:      daemonKind{},
		api.KindTrainingJob: trainingKind{},
	}
}

// names lists the kinds of the table, sorted.
func (kt kindTable) names() []string { return slices.Sorted(maps.Keys(kt)) }

// of returns the hooks of kind: a kind the table lacks gets the defaults
// (DecideWith makes its decision unschedulable, naming the kind).
func (kt kindTable) of(kind string) kindHooks {
	if k, ok := kt[kind]; ok {
		return k
	}
	return unknownKind{}
}

// Kinds lists the kinds the scheduler can divide, sorted. A workload of
// any other kind is unschedulable, with a reason that says so.
func Kinds() []string { return kinds().names() }

// defaults are the hooks of a kind that adds nothing to a phase; a kind
// embeds it and overrides what it does differently.
type defaults struct{}

func (defaults) gate(context.Context, *Service, *term, *recon) (bool, error) { return false, nil }

func (defaults) stands(*Service, *api.PlacementDecision, *api.Workload, []*api.ClusterInfo) bool {
	return true
}

func (defaults) afterDecide(_ *Service, _ *term, _ *recon, d api.PlacementDecision) api.PlacementDecision {
	return d
}

func (defaults) announce(context.Context, *Service, *api.Workload, *api.PlacementDecision, uint64, bool) error {
	return nil
}

func (defaults) finishes() bool { return true }

func (defaults) replays() bool { return true }

// unknownKind stands in for a placed kind the table lacks: DecideWith
// never divides it.
type unknownKind struct{ defaults }

func (unknownKind) divide(*api.Workload, *framework.Workload, []candidate) []api.Shard { return nil }
