package scheduler

import (
	"slices"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	"atoll.dev/services/scheduler/plugins/fit"
)

// The CronJob. A CronJob is placed like a Pod, in ONE cluster (the best
// candidate), so it fires once per schedule time in the region; its
// placement is sticky like every other, across generations too (an edit
// keeps its cluster while that cluster passes every filter but the fit,
// as a Pod's does), and moves only when its cluster stops passing the
// health filter.
//
// The time fence. A decision that puts a CronJob in a cluster other than
// the one its previous decision held it in gives the new shard
// api.Shard.FireFrom = Service.Fence's FireFrom(decision time): the new cluster
// fires no schedule time the old one may still fire, whatever the old one
// does when it comes back. The value is part of the placement, so a
// restarted or new scheduler term, and every propagator replica, see the
// same one; a decision that keeps the cluster keeps it. Conservatively, a
// previous decision without a shard (unschedulable, preempted, stopped)
// counts as a move from wherever it was before: only a first placement
// fires from its creation.

// cronJobKind is the CronJob's hooks.
type cronJobKind struct{ defaults }

func (cronJobKind) divide(w *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard {
	return oneCluster(w, fw, cands)
}

// afterDecide keeps the CronJob's cluster and sets its fence
// (cronJobDecision).
func (cronJobKind) afterDecide(s *Service, t *term, r *recon, d api.PlacementDecision) api.PlacementDecision {
	return s.cronJobDecision(t, r.w, r.prev, d)
}

// cronJobDecision is the decision d for a CronJob, made from prev: its
// cluster kept across generations and its fence set (see above).
func (s *Service) cronJobDecision(t *term, w *api.Workload, prev *api.PlacementDecision, d api.PlacementDecision) api.PlacementDecision {
	d = fenceCronJob(w, prev, d, s.snapshot(t), s.Options.Options, s.Fence)
	if prev != nil && len(d.Shards) == 1 && !d.Shards[0].FireFrom.IsZero() &&
		(len(prev.Shards) != 1 || prev.Shards[0].Cluster != d.Shards[0].Cluster) {
		s.log.Info("cronjob moved", "key", w.Key(), "from", clustersOf(prev), "to", d.Shards[0].Cluster,
			"fireFrom", d.Shards[0].FireFrom)
	}
	return d
}

// fenceCronJob returns d for a CronJob: its previous cluster kept when
// prev held it in one that still passes every filter but fit, and the
// shard's FireFrom carried (same cluster) or set from f (a move).
func fenceCronJob(w *api.Workload, prev *api.PlacementDecision, d api.PlacementDecision, snap []*api.ClusterInfo, o framework.Options, f api.CronFence) api.PlacementDecision {
	if d.Unschedulable || len(d.Shards) != 1 {
		return d
	}
	d.Shards = slices.Clone(d.Shards)
	if prev == nil {
		d.Shards[0].FireFrom = time.Time{} // a first placement
		return d
	}
	if len(prev.Shards) == 1 && prev.Shards[0].Cluster != d.Shards[0].Cluster {
		i := slices.IndexFunc(snap, func(c *api.ClusterInfo) bool { return c.Name == prev.Shards[0].Cluster })
		if i >= 0 && passesAllBut(framework.NewWorkload(w, o), snap[i], fit.Name) {
			d.Shards[0] = prev.Shards[0]
		}
	}
	if len(prev.Shards) == 1 && prev.Shards[0].Cluster == d.Shards[0].Cluster {
		d.Shards[0].FireFrom = prev.Shards[0].FireFrom
		return d
	}
	d.Shards[0].FireFrom = f.FireFrom(d.Decided)
	return d
}

// clustersOf lists the clusters of d's shards.
func clustersOf(d *api.PlacementDecision) []string {
	out := make([]string, 0, len(d.Shards))
	for _, sh := range d.Shards {
		out = append(out, sh.Cluster)
	}
	return out
}
