package api

import (
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The Pod kind (KindPod): one general-purpose pod in one member cluster,
// placed like any workload (the best cluster that fits) and kept there.
//
// Updates. A change of only the images of its containers, init containers
// or sidecars is applied to the live Pod in place: the propagator patches
// it (same UID) and the kubelet restarts only the containers whose image
// changed, so only their restart counts go up. Any other change of the
// template replaces the Pod (a Pod's spec is otherwise immutable), as a
// restart operation does. Sidecars are native sidecars (init containers
// with restartPolicy Always): they start before and stop after the main
// containers.
//
// Failover. When the Pod's cluster is lost (its health probes fail for the
// aggregator's grace period) the scheduler places the Pod in another
// cluster that fits, publishing EventFailedOver (naming both clusters);
// the Pod is created there. When the lost cluster returns, the propagator
// removes the stale Pod (and its claim) from it: a Pod runs in one cluster.
//
// Volume data policy. The optional Volume is a PersistentVolumeClaim in
// the Pod's cluster, named PodClaimName(pod, cluster) and mounted into
// every main container at Volume.MountPath. It outlives restarts, in-place
// image updates and replacements of the Pod within its cluster. It is NOT
// moved by a failover: the platform cannot copy data out of a cluster it
// cannot reach, and two live copies would diverge. So the new cluster
// gets a fresh, empty claim; the old claim and its data stay in the lost
// cluster, untouched, until that cluster comes back, when they are
// deleted with the stale Pod (so there is never a second, stale copy to
// mistake for the truth). Deleting or stopping the Pod deletes its claim.
// Data that must survive the loss of a cluster belongs in a regional
// store, not in a Pod's volume.

// EventFailedOver is published by the scheduler when a Pod leaves a lost
// cluster for another; its message names both.
const EventFailedOver = "failed-over"

// PodVolumeName is the pod volume that carries the claim.
const PodVolumeName = "atoll-data"

// PodVolume is a Pod's optional persistent volume.
type PodVolume struct {
	// Size is the claim's storage request ("1Gi").
	Size string `json:"size"`
	// StorageClassName is the claim's class; unset means the cluster's
	// default class, "" means no class (binds a matching static volume).
	StorageClassName *string `json:"storageClassName,omitempty"`
	// MountPath is where every main container sees it (absolute).
	MountPath string `json:"mountPath"`
}

// ClaimBytes implements ClaimsStorage: the size of the Pod's volume, if
// it has one (an unparsable size, caught by validation, counts as zero).
func (s *PodSpec) ClaimBytes() int64 {
	if s.Volume == nil {
		return 0
	}
	q, err := resource.ParseQuantity(s.Volume.Size)
	if err != nil {
		return 0
	}
	return q.Value()
}

// PodClaimName is the name of the claim of Pod pod in cluster: named after
// its shard, so claims left in different clusters are told apart.
func PodClaimName(pod, cluster string) string { return pod + "-data-" + cluster }

func (v *PodVolume) validate(p string, t *PodTemplate, fe *FieldErrors) {
	if v == nil {
		return
	}
	switch q, err := resource.ParseQuantity(v.Size); {
	case v.Size == "":
		fe.add(p+".size", CodeRequired, "size is required")
	case err != nil:
		fe.add(p+".size", CodeInvalid, "%q is not a quantity", v.Size)
	case q.Sign() <= 0:
		fe.add(p+".size", CodeInvalid, "%s is not positive", v.Size)
	}
	if c := v.StorageClassName; c != nil && *c != "" && !IsDNSSubdomain(*c) {
		fe.add(p+".storageClassName", CodeInvalid, "%q is not a storage class name", *c)
	}
	switch {
	case v.MountPath == "":
		fe.add(p+".mountPath", CodeRequired, "mountPath is required")
	case !path.IsAbs(v.MountPath) || path.Clean(v.MountPath) != v.MountPath:
		fe.add(p+".mountPath", CodeInvalid, "%q is not a clean absolute path", v.MountPath)
	}
	for _, vol := range t.Volumes {
		if vol.Name == PodVolumeName {
			fe.add(p, CodeDuplicate, "the template already has a volume named %q", PodVolumeName)
		}
	}
}

// IsDNSSubdomain reports whether s is an RFC 1123 subdomain (dot-separated
// DNS labels, at most 253 characters).
func IsDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !IsDNSLabel(l) {
			return false
		}
	}
	return true
}

// PodStatus is what a Pod's status carries beyond the counts: its
// containers' images and restarts, and its volume.
type PodStatus struct {
	// Cluster is the member cluster whose Pod this is.
	Cluster string `json:"cluster"`
	// UID is the live Pod's UID (the same across in-place updates).
	UID string `json:"uid,omitempty"`
	// Containers are the init containers, sidecars and main containers,
	// in that order.
	Containers []ContainerStatus `json:"containers,omitempty"`
	// Volume is the claim's state, when the Pod has a volume.
	Volume *VolumeStatus `json:"volume,omitempty"`
}

// Container types in ContainerStatus.Type.
const (
	ContainerMain    = "container"
	ContainerInit    = "init"
	ContainerSidecar = "sidecar"
)

// ContainerStatus is one container of a Pod as its cluster reports it.
type ContainerStatus struct {
	Name string `json:"name"`
	// Type is ContainerMain, ContainerInit or ContainerSidecar.
	Type string `json:"type"`
	// Image is the image the container runs (the status's, so an in-place
	// update shows once the kubelet has restarted it).
	Image        string `json:"image"`
	RestartCount int32  `json:"restartCount"`
	Ready        bool   `json:"ready"`
	// State is Waiting, Running or Terminated (with its reason, if any).
	State string `json:"state,omitempty"`
}

// VolumeStatus is the state of a Pod's claim.
type VolumeStatus struct {
	Claim string `json:"claim"`
	// Phase is the claim's: Pending, Bound or Lost ("" before it exists).
	Phase string `json:"phase"`
	// Capacity is the bound volume's size.
	Capacity string `json:"capacity,omitempty"`
	// VolumeName is the bound PersistentVolume.
	VolumeName string `json:"volumeName,omitempty"`
}
