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
// its one placed shard into api.Status.Pod.

// podObservation is a Pod workload's Pod and claim in one cluster.
type podObservation struct {
	UID        string                `json:"uid,omitempty"`
	Containers []api.ContainerStatus `json:"containers,omitempty"`
	Volume     *api.VolumeStatus     `json:"volume,omitempty"`
}

// observePod adds the Pod and claim of the Pod workload key to obs.
func (t *clusterTerm) observePod(obs *observation, key, name string, pods []*corev1.Pod) {
	if _, kind, _, err := api.ParseKey(key); err != nil || kind != api.KindPod {
		return
	}
	var claim *corev1.PersistentVolumeClaim
	if t.claims != nil {
		if objs, err := t.claims.ByIndex(byWorkload, key); err == nil {
			for _, o := range objs {
				if c, ok := o.(*corev1.PersistentVolumeClaim); ok && c.Name == api.PodClaimName(name, t.c.member.Name) {
					claim = c
				}
			}
		}
	}
	var pod *corev1.Pod
	for _, p := range pods {
		if p.Name == name && p.DeletionTimestamp == nil {
			pod = p
		}
	}
	obs.Pod = podObserved(pod, claim)
}

// podObserved sums up a Pod and its claim (either may be nil); nil when
// both are.
func podObserved(p *corev1.Pod, claim *corev1.PersistentVolumeClaim) *podObservation {
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
	statuses := func(ss []corev1.ContainerStatus) map[string]corev1.ContainerStatus {
		m := make(map[string]corev1.ContainerStatus, len(ss))
		for _, s := range ss {
			m[s.Name] = s
		}
		return m
	}
	add := func(c corev1.Container, typ string, by map[string]corev1.ContainerStatus) {
		cs := api.ContainerStatus{Name: c.Name, Type: typ, Image: c.Image}
		if s, ok := by[c.Name]; ok {
			// The status's image is what runs: after an in-place update
			// it changes once the kubelet has restarted the container.
			cs.Image = cmp.Or(s.Image, c.Image)
			cs.RestartCount, cs.Ready, cs.State = s.RestartCount, s.Ready, containerState(s.State)
		} else {
			cs.State = "Waiting"
		}
		o.Containers = append(o.Containers, cs)
	}
	inits := statuses(p.Status.InitContainerStatuses)
	for _, c := range p.Spec.InitContainers {
		typ := api.ContainerInit
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			typ = api.ContainerSidecar
		}
		add(c, typ, inits)
	}
	mains := statuses(p.Status.ContainerStatuses)
	for _, c := range p.Spec.Containers {
		add(c, api.ContainerMain, mains)
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
		if o := sh.obs.Pod; o != nil {
			st.Pod = &api.PodStatus{Cluster: sh.cluster, UID: o.UID, Containers: o.Containers, Volume: o.Volume}
			return
		}
	}
}
