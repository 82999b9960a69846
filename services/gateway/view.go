package gateway

import (
	"encoding/json"
	"fmt"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

// renderWorkload is the API's view of a workload: what a developer needs,
// none of the member clusters' objects or bookkeeping.
func renderWorkload(w *api.Workload, st *api.Status) ([]byte, error) {
	spec, err := json.Marshal(specView(w.Spec))
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", w.Key(), err)
	}
	m := w.Metadata
	out := computeapi.Workload{
		ApiVersion: w.APIVersion,
		Kind:       w.Kind,
		Metadata: computeapi.Metadata{Project: m.Project, Name: m.Name, Labels: m.Labels,
			Generation: m.Generation, Uid: m.UID, Created: m.Created, Updated: m.Updated},
		Spec:   spec,
		Status: statusView(w.Kind, st),
	}
	if c := w.Control; !c.IsZero() {
		out.Control = computeapi.Control{Paused: c.Paused, Stopped: c.Stopped, RestartedAt: c.RestartedAt, ContainerRestarts: c.ContainerRestarts}
		if r := c.Rollout; r != nil {
			out.Control.Rollout.Paused, out.Control.Rollout.At, out.Control.Rollout.Op = r.Paused, r.At, computeapi.ControlRolloutOp(r.Op)
		}
	}
	return json.Marshal(out)
}

func statusView(kind string, st *api.Status) computeapi.WorkloadStatus {
	if st == nil {
		return computeapi.WorkloadStatus{Phase: api.PhasePending}
	}
	v := computeapi.WorkloadStatus{
		Phase: st.Phase, ObservedGeneration: st.Generation,
		Desired: st.Desired, Ready: st.Ready, Running: st.Running, Succeeded: st.Succeeded, Failed: st.Failed,
		Images: st.Images, Updated: st.Updated, ConfigVersions: st.ConfigVersions,
	}
	counts := func(in map[string]api.ZoneStatus) map[string]computeapi.Counts {
		if len(in) == 0 {
			return nil
		}
		out := make(map[string]computeapi.Counts, len(in))
		for k, z := range in {
			out[k] = computeapi.Counts{Desired: z.Desired, Ready: z.Ready, Running: z.Running, Succeeded: z.Succeeded, Failed: z.Failed,
				ConfigVersions: z.ConfigVersions, Templates: z.Templates}
		}
		return out
	}
	v.Zones, v.Clusters = counts(st.Zones), counts(st.Clusters)
	for _, r := range st.Reasons {
		v.Reasons = append(v.Reasons, computeapi.Rejection{Cluster: r.Cluster, Filter: r.Filter, Reason: r.Reason})
	}
	for _, c := range st.Conditions {
		v.Conditions = append(v.Conditions, computeapi.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
	}
	for _, e := range st.Events {
		v.Events = append(v.Events, computeapi.KubeEvent{Cluster: e.Cluster, Object: e.Object, Type: e.Type, Reason: e.Reason, Message: e.Message, Time: e.Time})
	}
	kindStatusView(kind, st, &v) // view_kinds.go
	queueStatusView(st, &v)      // tiers_view.go
	return v
}

func clusterView(c *api.ClusterInfo) computeapi.Cluster {
	v := computeapi.Cluster{Name: c.Name, Zone: c.Zone, Labels: c.Labels, Healthy: c.Healthy, Cordoned: c.Cordoned,
		Message: c.Message, LastSeen: c.LastSeen, Updated: c.Updated}
	if len(c.Pools) > 0 {
		v.Pools = make(map[string]computeapi.Pool, len(c.Pools))
		for name, p := range c.Pools {
			v.Pools[name] = computeapi.Pool{Nodes: p.Nodes, ReadyNodes: p.ReadyNodes, Tier: p.Tier, GpuType: p.GPUType,
				Allocatable: computeapi.Resources{MilliCPU: p.Allocatable.MilliCPU, MemoryBytes: p.Allocatable.MemoryBytes, Gpus: p.Allocatable.GPUs, Pods: p.AllocatablePods},
				Requested:   computeapi.Resources{MilliCPU: p.Requested.MilliCPU, MemoryBytes: p.Requested.MemoryBytes, Gpus: p.Requested.GPUs, Pods: p.RequestedPods}}
		}
	}
	return v
}

// quotaView is a project's quota: the caps in force per tier (its own
// limits over the region's defaults def), usage, and its workloads
// against the cap. l is nil for a project with no ledger yet.
func quotaView(project string, l *api.Ledger, def api.QuotaDefaults) computeapi.Quota {
	if l == nil {
		l = &api.Ledger{Project: project}
	}
	q := computeapi.Quota{Project: project, Tiers: []computeapi.TierQuota{}, Workloads: l.Reservations, MaxWorkloads: def.MaxWorkloads}
	for _, t := range api.Tiers {
		_, own := l.Limits[t]
		c, u := l.Caps(t, def), l.Used(t)
		tq := computeapi.TierQuota{Tier: string(t), Default: !own,
			Limit: computeapi.Resources{MilliCPU: c.MilliCPU, MemoryBytes: c.MemoryBytes, Gpus: c.GPUs, Pods: c.Pods, StorageBytes: c.StorageBytes},
			Used:  computeapi.Resources{MilliCPU: u.MilliCPU, MemoryBytes: u.MemoryBytes, Gpus: u.GPUs, Pods: u.Pods, StorageBytes: u.StorageBytes}}
		borrowedView(l, &tq) // tiers_view.go
		q.Tiers = append(q.Tiers, tq)
	}
	return q
}
