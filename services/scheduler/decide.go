package scheduler

import (
	"cmp"
	"fmt"
	"maps"
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

// divider splits a workload over its candidates, best first. Adding a kind
// means adding its divider here; TestEveryKindHasADivider fails until then.
type divider func(w *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard

var dividers = map[string]divider{
	api.KindApp:    divideReplicas,
	api.KindJobSet: divideIndexes,
	api.KindPod:    oneCluster,
}

// Kinds lists the kinds the scheduler can divide, sorted. A workload of
// any other kind is unschedulable, with a reason that says so.
func Kinds() []string {
	return slices.Sorted(maps.Keys(dividers))
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

// DecideWith places a workload on a snapshot of the member clusters. It is
// a pure function of its inputs, linear in the number of clusters: what
// the scorers need of the whole region is computed once. A stopped
// workload gets an empty placement (no shards, and not unschedulable), so
// its objects are removed from every cluster until it is started.
func DecideWith(w *api.Workload, clusters []*api.ClusterInfo, now time.Time, o framework.Options) Outcome {
	d := api.PlacementDecision{Key: w.Key(), Generation: w.Metadata.Generation, Decided: now}
	if w.Control.Stopped {
		return Outcome{Decision: d}
	}
	divide, ok := dividers[w.Kind]
	if !ok {
		d.Unschedulable = true
		d.Reasons = []api.Rejection{{Filter: "Kind", Reason: fmt.Sprintf("the scheduler cannot divide kind %q (it knows %s)", w.Kind, strings.Join(Kinds(), ", "))}}
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
	d.Shards = divide(w, fw, cands)
	if len(d.Shards) == 0 { // a gang no one cluster fits whole (training.go)
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

// split divides n into len(weights) parts proportional to weights, handing
// the remainder out one each in order (so it is spread, not piled).
func split(n int64, weights []int64) []int64 {
	out := make([]int64, len(weights))
	var total int64
	for _, w := range weights {
		total += w
	}
	if total == 0 || n <= 0 {
		return out
	}
	var given int64
	for i, w := range weights {
		out[i] = n * w / total
		given += out[i]
	}
	for i := 0; given < n; i = (i + 1) % len(out) {
		if weights[i] > 0 {
			out[i]++
			given++
		}
	}
	return out
}

// spread divides n pods across zones evenly, then across each zone's
// clusters, then moves what a cluster has no room for to clusters that do.
// It returns pods per candidate, in candidate order.
func spread(n int64, cands []candidate) []int64 {
	var zones []string
	byZone := map[string][]int{}
	for i, c := range cands {
		z := c.cluster.Zone
		if _, ok := byZone[z]; !ok {
			zones = append(zones, z) // zones ordered by their best cluster
		}
		byZone[z] = append(byZone[z], i)
	}
	ones := func(k int) []int64 {
		w := make([]int64, k)
		for i := range w {
			w[i] = 1
		}
		return w
	}
	out := make([]int64, len(cands))
	for zi, share := range split(n, ones(len(zones))) {
		idx := byZone[zones[zi]]
		for j, s := range split(share, ones(len(idx))) {
			out[idx[j]] = s
		}
	}
	// Overflow: clusters asked for more than they have room for give the
	// excess to clusters with room, one at a time in turn. With no room anywhere the
	// excess stays (its pods wait inside the cluster).
	var excess int64
	for i, c := range cands {
		if out[i] > c.room {
			excess += out[i] - c.room
			out[i] = c.room
		}
	}
	for moved := true; excess > 0 && moved; {
		moved = false
		for i, c := range cands {
			if excess > 0 && out[i] < c.room {
				out[i]++
				excess--
				moved = true
			}
		}
	}
	for i := 0; excess > 0; i = (i + 1) % len(out) {
		out[i]++
		excess--
	}
	return out
}

func divideReplicas(_ *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard {
	var shards []api.Shard
	for i, n := range spread(int64(fw.Pods), cands) {
		if n > 0 {
			c := cands[i].cluster
			shards = append(shards, api.Shard{Cluster: c.Name, Zone: c.Zone, Replicas: int32(n)})
		}
	}
	sortShards(shards)
	return shards
}

// divideIndexes spreads a JobSet's parallelism like replicas, then gives
// each shard a contiguous index range proportional to its parallelism.
func divideIndexes(w *api.Workload, fw *framework.Workload, cands []candidate) []api.Shard {
	js := w.Spec.(*api.JobSetSpec)
	shards := divideReplicas(w, fw, cands)
	weights := make([]int64, len(shards))
	for i, s := range shards {
		weights[i] = int64(s.Replicas)
	}
	var start int32
	for i, n := range split(int64(js.Completions), weights) {
		shards[i].IndexStart, shards[i].IndexEnd = start, start+int32(n)
		start += int32(n)
	}
	return shards
}

func oneCluster(_ *api.Workload, _ *framework.Workload, cands []candidate) []api.Shard {
	c := cands[0].cluster
	return []api.Shard{{Cluster: c.Name, Zone: c.Zone, Replicas: 1}}
}

func sortShards(s []api.Shard) {
	slices.SortFunc(s, func(a, b api.Shard) int { return cmp.Compare(a.Cluster, b.Cluster) })
}
