package aggregator

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/api"
)

// A Pod workload's observation adds, beyond the counts, its Pod's
// containers (image as the kubelet reports it, restart count, readiness,
// state) and the state of its claim (api.PodVolume), so that an in-place
// image update and a volume's binding show in the status. The claims are
// watched like the other objects (their labels name the workload), so a
// claim that binds updates the status at once. foldPod copies them from
// its one placed shard into api.Status.Pod. A Pod is Running once its pod
// is ready, Succeeded or Failed as its pod ends.

// podKind is the Pod's part of the aggregator.
type podKind struct{ basic }

// podPart is what a cluster holds of a Pod workload beyond the counts.
type podPart struct {
	// Pod is its Pod and claim.
	Pod *podObservation `json:"pod,omitempty"`
}

// podObservation is a Pod workload's Pod and claim in one cluster.
type podObservation struct {
	UID        string                `json:"uid,omitempty"`
	Containers []api.ContainerStatus `json:"containers,omitempty"`
	Volume     *api.VolumeStatus     `json:"volume,omitempty"`
}

func (podKind) watches() []watch { return []watch{{claims, ""}} }

// observe adds the Pod and its claim. A claim alone does not make an
// observation: the cluster holds the workload while it holds its Pod.
func (podKind) observe(t *clusterTerm, key, name string, pods []*podView) (any, bool) {
	var claim *corev1.PersistentVolumeClaim
	for _, o := range t.objectsOf(claims, key) {
		if c, ok := o.(*corev1.PersistentVolumeClaim); ok && c.Name == api.PodClaimName(name, t.c.member.Name) {
			claim = c
		}
	}
	var pod *podView
	for _, p := range pods {
		if p.Name == name && !p.Deleting {
			pod = p
		}
	}
	return &podPart{Pod: podObserved(pod, claim)}, false
}

func (podKind) part() any { return &podPart{} }

func (podKind) fold(w *api.Workload, shards []shardView, st *api.Status) { foldPod(w, shards, st) }

// podObserved sums up a Pod and its claim (either may be nil); nil when
// both are.
func podObserved(p *podView, claim *corev1.PersistentVolumeClaim) *podObservation {
	if p == nil && claim == nil {
		return nil
	}
	o := &podObservation{}
	if claim != nil {
		v := &api.VolumeStatus{Claim: claim.Name, Phase: string(claim.Status.Phase), VolumeName: claim.Spec.VolumeName}
		if q, ok := claim.Status.Capacity[corev1.ResourceStorage]; ok {
			v.Capacity = q.String()
		}
		o.Volume = v
	}
	if p == nil {
		return o
	}
	o.UID = string(p.UID)
	for _, c := range p.Containers {
		cs := api.ContainerStatus{Name: c.Name.String(), Type: c.Type.String(), Image: c.Image.String(), State: "Waiting"}
		if c.HasStatus {
			// The status's image is what runs: after an in-place update
			// it changes once the kubelet has restarted the container.
			cs.Image = cmp.Or(c.StatusImage.String(), cs.Image)
			cs.RestartCount, cs.Ready, cs.State = c.Restarts, c.Ready, c.State.String()
		}
		o.Containers = append(o.Containers, cs)
	}
	return o
}

// containerState names a container's state, with its reason when it has one.
func containerState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "Running"
	case s.Terminated != nil:
		return "Terminated" + reasonSuffix(s.Terminated.Reason)
	case s.Waiting != nil:
		return "Waiting" + reasonSuffix(s.Waiting.Reason)
	}
	return ""
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}

// foldPodDetails copies the Pod and claim of the Pod's placed shard into
// the status: the healthy shard's, else the first that has one.
func foldPodDetails(shards []shardView, st *api.Status) {
	shards = slices.Clone(shards)
	slices.SortStableFunc(shards, func(a, b shardView) int {
		switch {
		case a.healthy == b.healthy:
			return 0
		case a.healthy:
			return -1
		}
		return 1
	})
	for _, sh := range shards {
		if o := partOf[podPart](sh.obs).Pod; o != nil {
			st.Pod = &api.PodStatus{Cluster: sh.cluster, UID: o.UID, Containers: o.Containers, Volume: o.Volume}
			return
		}
	}
}

func foldPod(_ *api.Workload, shards []shardView, st *api.Status) {
	st.Phase = api.PhaseScheduled
	for _, sh := range shards {
		o := sh.obs
		zs := api.ZoneStatus{Desired: 1, Ready: o.Ready, Running: o.Running, Succeeded: o.Succeeded, Failed: o.Failed}
		st.Conditions = append(st.Conditions, o.Unscheduled...)
		addTo(st, sh, zs)
		switch {
		case zs.Succeeded > 0:
			st.Phase = api.PhaseSucceeded
		case zs.Failed > 0:
			st.Phase = api.PhaseFailed
		case zs.Ready > 0:
			st.Phase = api.PhaseRunning
		case !sh.healthy:
			st.Phase = api.PhaseDegraded
		}
	}
	foldPodDetails(shards, st)
}
