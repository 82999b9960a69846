package gateway

import (
	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

// podStatusView adds a Pod's containers (image, restart count) and volume
// to its status view.
func podStatusView(st *api.Status, v *computeapi.WorkloadStatus) {
	p := st.Pod
	if p == nil {
		return
	}
	pv := computeapi.PodStatus{Cluster: p.Cluster, Uid: p.UID}
	for _, c := range p.Containers {
		pv.Containers = append(pv.Containers, computeapi.PodContainerStatus{
			Name: c.Name, Type: computeapi.PodContainerStatusType(c.Type), Image: c.Image,
			RestartCount: c.RestartCount, Ready: c.Ready, State: c.State,
		})
	}
	if vol := p.Volume; vol != nil {
		pv.Volume = computeapi.PodVolumeStatus{Claim: vol.Claim, Phase: vol.Phase, Capacity: vol.Capacity, VolumeName: vol.VolumeName}
	}
	v.Pod = pv
}
