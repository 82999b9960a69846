package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
	"atoll.dev/services/scheduler/plugins"
)

// candidate is a cluster that passed every filter, with its total score.
type candidate struct {
	cluster *api.ClusterInfo
	score   int64
	// room is how many more pods of the workload fit.
	room int64
}

// Decide places a workload on a snapshot of the member clusters under the
// default options. See DecideWith.
func Decide(w *api.Workload, clusters []*api.ClusterInfo, now time.Time) api.PlacementDecision {
	return DecideWith(w, clusters, now, framework.Options{}).Decision
}

// Outcome is a decision and what the scheduler needs to know beyond it.
type Outcome struct {
	// Decision is the placement.
	Decision api.PlacementDecision
	// Room is how many of the workload's pods the candidates have room
	// for; below Pods, the rest would wait inside the clusters (and a
	// Reserved or OnDemand workload may preempt).
	Room int64
	// Pods is how many pods the workload runs at once.
	Pods int64
	// Workload is the plugins' view of the workload.
	Workload *framework.Workload
}

// filters are the filter plugins in FilterOrder (stateless, made once).
var filters = func() []framework.Filter {
	out := make([]framework.Filter, 0, len(plugins.FilterOrder))
	for _, name := range plugins.FilterOrder {
		out = append(out, plugins.Filters[name]())
	}
	return out
}()

// DecideWith places a workload on a snapshot of the member clusters with
// the scheduler's kinds. See kindTable.decide.
func DecideWith(w *api.Workload, clusters []*api.ClusterInfo, now time.Time, o framework.Options) Outcome {
	return kinds().decide(w, clusters, now, o)
}

// decide places a workload on a snapshot of the member clusters. It is a
// pure function of its inputs, linear in the number of clusters: what the
// scorers need of the whole region is computed once. A stopped workload
// gets an empty placement (no shards, and not unschedulable), so its
// objects are removed from every cluster until it is started. A kind
// missing from the table is unschedulable, with a reason that names it.
func (kt kindTable) decide(w *api.Workload, clusters []*api.ClusterInfo, now time.Time, o framework.Options) Outcome {
	d := api.PlacementDecision{Key: w.Key(), Generation: w.Metadata.Generation, Decided: now}
	if w.Control.Stopped {
		return Outcome{Decision: d}
	}
	kind, ok := kt[w.Kind]
	if !ok {
		d.Unschedulable = true
		d.Reasons = []api.Rejection{{Filter: "Kind", Reason: fmt.Sprintf("the scheduler cannot divide kind %q (it knows %s)", w.Kind, strings.Join(kt.names(), ", "))}}
		return Outcome{Decision: d}
	}
	fw := framework.NewWorkload(w, o)
	out := Outcome{Pods: int64(fw.Pods), Workload: fw}
	region := framework.NewRegion(clusters)
	scorers := plugins.ScorersFor(fw.Tier)
	var cands []candidate
	for _, c := range clusters {
		ok := true
		for _, f := range filters {
			if reason := f.Filter(fw, c); reason != "" {
				d.Reasons = append(d.Reasons, api.Rejection{Cluster: c.Name, Filter: f.Name(), Reason: reason})
				ok = false
			}
		}
		if !ok {
			continue
		}
		var score int64
		for _, s := range scorers {
			score += s.Score(fw, c, region)
		}
		room := framework.PodsThatFit(fw, c)
		out.Room += room
		cands = append(cands, candidate{cluster: c, score: score, room: room})
	}
	if len(clusters) == 0 {
		d.Reasons = append(d.Reasons, api.Rejection{Filter: "Inventory", Reason: "no member clusters are known yet"})
	}
	if len(cands) == 0 {
		d.Unschedulable = true
		out.Decision = d
		return out
	}
	// Best first; ties by name, so the order is deterministic.
	slices.SortFunc(cands, func(a, b candidate) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.cluster.Name, b.cluster.Name)
	})
	d.Shards = kind.divide(w, fw, cands)
	if len(d.Shards) == 0 && fw.Pods == 0 {
		// Nothing asked for (an App scaled to 0 replicas): placed, with no
		// shard anywhere. Unschedulable, it would be retried every
		// RetryUnschedulable for as long as it stays at 0.
		d.Reasons = nil
		out.Decision = d
		return out
	}
	if len(d.Shards) == 0 { // say what each candidate fits (a gang no one cluster fits whole)
		d.Unschedulable = true
		d.Reasons = gangRejections(fw, cands, d.Reasons)
		out.Decision = d
		return out
	}
	markPools(fw, cands, d.Shards)
	d.Reasons = nil // placed: rejected clusters are not news
	out.Decision = d
	return out
}

// markPools notes, per shard, whether its pods go to the cluster's
// Reserved pools: always for Reserved work where the cluster has them;
// for Preemptible work allowed there, when the shared pools cannot hold
// the shard.
func markPools(fw *framework.Workload, cands []candidate, shards []api.Shard) {
	if fw.Tier == api.TierOnDemand || fw.Tier == api.TierPreemptible && !fw.Options.PreemptibleOnReserved {
		return
	}
	byName := make(map[string]*api.ClusterInfo, len(cands))
	for _, c := range cands {
		byName[c.cluster.Name] = c.cluster
	}
	for i := range shards {
		c, ok := byName[shards[i].Cluster]
		if !ok {
			continue
		}
		switch {
		case framework.PoolClass(fw.Tier, c):
			shards[i].PoolTier = api.PoolTierReserved
		case fw.Tier == api.TierPreemptible && c.HasReservedPools():
			shared := framework.CapacityOf(api.TierOnDemand, c, fw.Options)
			if shared.PodsThatFit(fw.PerPod) < int64(shards[i].Replicas) {
				shards[i].PoolTier = api.PoolTierReserved
			}
		}
	}
}

func sortShards(s []api.Shard) {
	slices.SortFunc(s, func(a, b api.Shard) int { return cmp.Compare(a.Cluster, b.Cluster) })
}
