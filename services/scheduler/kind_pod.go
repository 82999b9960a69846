package scheduler

import (
	"context"
	"fmt"
	"slices"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	"atoll.dev/services/scheduler/plugins/fit"
)

// Pod placement. A Pod is placed in one cluster (oneCluster). Its
// placement is sticky, across generations too: a new generation (say an
// image change, applied to the live Pod in place by the propagator) keeps
// the Pod's cluster while that cluster passes every filter but the fit
// (the Pod's own requests are already counted there), instead of moving
// it to whichever cluster scores best now (keepCluster).
//
// Pod failover. It moves when its cluster stops passing the health filter
// (stillGood), the same rule that moves a CronJob. A decision that takes
// a Pod out of a cluster that is unhealthy (or gone) into another carries
// the message of api.EventFailedOver, naming both clusters
// (PlacementDecision.FailedOver); like the scheduled event it follows the
// committed decision: published after the write, before the scheduled
// event, and ensured by whoever announces that decision later (a retry, a
// new term), under the placement's revision (events.MsgID).

// podKind is the Pod's hooks.
type podKind struct{ defaults }

func (podKind) divide(w *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard {
	return oneCluster(w, fw, cands)
}

// afterDecide keeps the Pod's cluster and marks a failover (podDecision).
func (podKind) afterDecide(s *Service, t *term, r *recon, d api.PlacementDecision) api.PlacementDecision {
	return s.podDecision(t, r.w, r.prev, d)
}

// announce sends the failed-over event of d, if it has one.
func (podKind) announce(ctx context.Context, s *Service, w *api.Workload, d *api.PlacementDecision, rev uint64, written bool) error {
	return s.announceFailover(ctx, w, d, rev, !written)
}

// oneCluster places the workload, one pod, in the best candidate.
func oneCluster(_ *api.Workload, _ *framework.Workload, cands []candidate) []api.Shard {
	c := cands[0].cluster
	return []api.Shard{{Cluster: c.Name, Zone: c.Zone, Replicas: 1}}
}

// failover returns the message of the failed-over event the move from
// prev to d warrants, and whether it does.
func failover(w *api.Workload, prev, d *api.PlacementDecision, snap []*api.ClusterInfo) (string, bool) {
	if w.Kind != api.KindPod || prev == nil || prev.Unschedulable || d.Unschedulable ||
		len(prev.Shards) != 1 || len(d.Shards) != 1 {
		return "", false
	}
	from, to := prev.Shards[0].Cluster, d.Shards[0].Cluster
	if from == to {
		return "", false
	}
	i := slices.IndexFunc(snap, func(c *api.ClusterInfo) bool { return c.Name == from })
	switch {
	case i < 0:
		return fmt.Sprintf("cluster %s is gone: moved from %s to %s", from, from, to), true
	case !snap[i].Healthy:
		why := snap[i].Message
		if why == "" {
			why = "unhealthy"
		}
		return fmt.Sprintf("cluster %s is lost (%s): moved from %s to %s", from, why, from, to), true
	}
	return "", false
}

// announceFailover publishes (or, with ensure, ensures) the failed-over
// event of decision d, written at rev, when it has one.
func (s *Service) announceFailover(ctx context.Context, w *api.Workload, d *api.PlacementDecision, rev uint64, ensure bool) error {
	if d.FailedOver == "" {
		return nil
	}
	publish := s.events.Publish
	if ensure {
		publish = s.events.Ensure
	}
	if err := publish(ctx, w, api.EventFailedOver, d.FailedOver, rev); err != nil {
		return fmt.Errorf("announce failover of %s: %w", w.Key(), err)
	}
	return nil
}

// podDecision is the decision d for a Pod, made from prev: its cluster
// kept (keepCluster), and a move out of a lost cluster marked
// (failover).
func (s *Service) podDecision(t *term, w *api.Workload, prev *api.PlacementDecision, d api.PlacementDecision) api.PlacementDecision {
	if prev == nil {
		return d
	}
	snap := s.snapshot(t)
	d = keepCluster(w, prev, d, snap, s.Options.Options)
	if msg, ok := failover(w, prev, &d, snap); ok {
		d.FailedOver = msg
		s.log.Info("pod failing over", "key", w.Key(), "message", msg)
	}
	return d
}

// keepCluster returns d with a Pod's previous cluster instead of the one
// d chose, when prev placed it in one cluster that still passes every
// filter but fit (see Pod placement above); d otherwise.
func keepCluster(w *api.Workload, prev *api.PlacementDecision, d api.PlacementDecision, snap []*api.ClusterInfo, o framework.Options) api.PlacementDecision {
	if w.Kind != api.KindPod || prev == nil || prev.Unschedulable || len(prev.Shards) != 1 ||
		d.Unschedulable || len(d.Shards) != 1 || d.Shards[0].Cluster == prev.Shards[0].Cluster {
		return d
	}
	i := slices.IndexFunc(snap, func(c *api.ClusterInfo) bool { return c.Name == prev.Shards[0].Cluster })
	if i < 0 || !passesAllBut(framework.NewWorkload(w, o), snap[i], fit.Name) {
		return d
	}
	d.Shards = []api.Shard{prev.Shards[0]}
	return d
}
