package scheduler

import (
	"cmp"
	"slices"
	"time"

	"atoll.dev/libs/api"
	"atoll.dev/services/scheduler/framework"
)

// Preemption. When a Reserved or OnDemand workload has not room for all
// its pods, the scheduler takes the placements of Preemptible workloads
// back to make it. PlanPreemption chooses them; it is a pure function,
// table-tested, in the shape of the kube-scheduler's and Kueue's:
//
//   - Only Preemptible work is ever a victim (the caller passes only
//     Preemptible placements; a victim never preempts, as it is
//     Preemptible, so preemption never cascades).
//   - A victim is a whole workload: all its shards go, so a gang is
//     evicted whole; its share of every cluster is freed.
//   - Clusters: one that needs no victims first; else the kube-scheduler's
//     order: the lowest highest-victim priority, the lowest sum of
//     priorities, the fewest victims, the newest victims (latest earliest
//     admission), then by name.
//   - Within a cluster: lowest priority first, then newest admitted,
//     taken greedily until the pods fit; then, walking back from the last
//     taken, every victim not needed is dropped.
//   - When no one cluster can make all the room, the cluster that makes
//     the most is taken and the rest is looked for on the others.

// Victim is a running Preemptible workload's share of one cluster.
type Victim struct {
	// Key is the workload's key.
	Key string
	// Priority is its spec.priority.
	Priority int32
	// Admitted is when it was admitted: newer is preempted first.
	Admitted time.Time
	// Pods and Req are its pods and their requests on this cluster, in
	// the pools the preemptor may use.
	Pods int64
	Req  api.Quantities
}

// PreemptionCluster is a cluster that passes every filter but resource
// fit for the preemptor.
type PreemptionCluster struct {
	Name string
	// Free and FreePods are what the preemptor's tier may still use there
	// (negative: over-committed).
	Free     api.Quantities
	FreePods int64
	// Victims are the Preemptible workloads on the pools it may use.
	Victims []Victim
}

// Preemption is one cluster's victims.
type Preemption struct {
	Cluster string
	Victims []Victim
	// Pods is how many of the preemptor's pods it makes room for.
	Pods int64
}

// PreemptionPlan is the victims chosen, cluster by cluster.
type PreemptionPlan struct {
	Steps []Preemption
	// Pods is how many pods the plan makes room for in all.
	Pods int64
}

// VictimKeys lists the plan's victims once each, in the order chosen.
func (p PreemptionPlan) VictimKeys() []string {
	var out []string
	for _, s := range p.Steps {
		for _, v := range s.Victims {
			if !slices.Contains(out, v.Key) {
				out = append(out, v.Key)
			}
		}
	}
	return out
}

// PlanPreemption chooses victims to make room for need pods of size per
// on clusters. It returns an empty plan when the victims cannot make room
// for even one pod.
func PlanPreemption(need int64, per api.Quantities, clusters []PreemptionCluster) PreemptionPlan {
	work := make([]PreemptionCluster, len(clusters))
	for i, c := range clusters {
		work[i] = c
		work[i].Victims = slices.Clone(c.Victims)
	}
	var plan PreemptionPlan
	done := map[string]bool{}
	for need > 0 {
		var best *option
		for i := range work {
			if done[work[i].Name] {
				continue
			}
			o := optionFor(&work[i], need, per)
			if o.pods > 0 && (best == nil || o.better(best, need)) {
				best = &o
			}
		}
		if best == nil {
			break
		}
		c := best.cluster
		done[c.Name] = true
		plan.Steps = append(plan.Steps, Preemption{Cluster: c.Name, Victims: best.victims, Pods: best.pods})
		plan.Pods += best.pods
		need -= best.pods
		// A victim's shares elsewhere are freed too.
		for _, v := range best.victims {
			for i := range work {
				if work[i].Name == c.Name {
					continue
				}
				if j := slices.IndexFunc(work[i].Victims, func(o Victim) bool { return o.Key == v.Key }); j >= 0 {
					o := work[i].Victims[j]
					work[i].Free = addQ(work[i].Free, o.Req)
					work[i].FreePods += o.Pods
					work[i].Victims = slices.Delete(work[i].Victims, j, j+1)
				}
			}
		}
	}
	return plan
}

// option is what preempting on one cluster would give.
type option struct {
	cluster *PreemptionCluster
	victims []Victim
	pods    int64 // pods made room for, at most the need
}

// optionFor chooses the cluster's minimal victims for need pods, or, when
// all its victims cannot make that much room, for as many as they can.
func optionFor(c *PreemptionCluster, need int64, per api.Quantities) option {
	fits := func(vs []Victim) int64 {
		free, pods := c.Free, c.FreePods
		for _, v := range vs {
			free, pods = addQ(free, v.Req), pods+v.Pods
		}
		return min(framework.PodsIn(free, pods, per), need)
	}
	if n := fits(nil); n >= need {
		return option{cluster: c, pods: need}
	}
	order := slices.Clone(c.Victims)
	slices.SortFunc(order, func(a, b Victim) int {
		if x := cmp.Compare(a.Priority, b.Priority); x != 0 {
			return x
		}
		if x := b.Admitted.Compare(a.Admitted); x != 0 { // newest first
			return x
		}
		return cmp.Compare(a.Key, b.Key)
	})
	target := min(fits(order), need)
	if target <= fits(nil) {
		return option{cluster: c} // victims here make no room
	}
	var taken []Victim
	for _, v := range order {
		taken = append(taken, v)
		if fits(taken) >= target {
			break
		}
	}
	// Walk back: drop every victim the rest make room without, the
	// last taken (the highest priority, the oldest) first.
	for i := len(taken) - 1; i >= 0; i-- {
		without := slices.Delete(slices.Clone(taken), i, i+1)
		if fits(without) >= target {
			taken = without
		}
	}
	return option{cluster: c, victims: taken, pods: target}
}

// better orders options: one that makes all the room needed first; then
// no victims; then the kube-scheduler's order.
func (o *option) better(b *option, need int64) bool {
	if (o.pods >= need) != (b.pods >= need) {
		return o.pods >= need
	}
	if o.pods != b.pods {
		return o.pods > b.pods
	}
	if (len(o.victims) == 0) != (len(b.victims) == 0) {
		return len(o.victims) == 0
	}
	ho, hb := highest(o.victims), highest(b.victims)
	if ho != hb {
		return ho < hb
	}
	so, sb := sumPriorities(o.victims), sumPriorities(b.victims)
	if so != sb {
		return so < sb
	}
	if len(o.victims) != len(b.victims) {
		return len(o.victims) < len(b.victims)
	}
	eo, eb := earliest(o.victims), earliest(b.victims)
	if !eo.Equal(eb) {
		return eo.After(eb) // newest
	}
	return o.cluster.Name < b.cluster.Name
}

func highest(vs []Victim) int32 {
	h := int32(-1 << 31)
	for _, v := range vs {
		h = max(h, v.Priority)
	}
	return h
}

func sumPriorities(vs []Victim) int64 {
	var s int64
	for _, v := range vs {
		s += int64(v.Priority)
	}
	return s
}

func earliest(vs []Victim) time.Time {
	var e time.Time
	for i, v := range vs {
		if i == 0 || v.Admitted.Before(e) {
			e = v.Admitted
		}
	}
	return e
}

func addQ(a, b api.Quantities) api.Quantities {
	return api.Quantities{MilliCPU: a.MilliCPU + b.MilliCPU, MemoryBytes: a.MemoryBytes + b.MemoryBytes, GPUs: a.GPUs + b.GPUs}
}
