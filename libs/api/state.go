package api

import (
	"strings"
	"time"
)

// PlacementDecision is the scheduler's decision for one workload, stored in
// the placements bucket under the workload's key.
type PlacementDecision struct {
	// Key is the workload's key.
	Key string `json:"key"`
	// Generation is the workload generation the decision was made for.
	Generation int64 `json:"generation"`
	// Shards are the clusters chosen, in a stable order.
	Shards []Shard `json:"shards,omitempty"`
	// Unschedulable is set when no cluster can take the workload.
	Unschedulable bool `json:"unschedulable,omitempty"`
	// Reasons say why each rejected cluster was rejected, per filter.
	Reasons []Rejection `json:"reasons,omitempty"`
	// Decided is when the decision was made.
	Decided time.Time `json:"decided"`
	// Queue is the tier queue an unschedulable workload waits in
	// (Reserved, OnDemand, Preemptible), and Position its place there
	// (1: next) when the decision was made.
	Queue    string `json:"queue,omitempty"`
	Position int    `json:"position,omitempty"`
	// PreemptedBy names the workload (key) whose room this one's last
	// placement was taken back for; set while it waits to run again.
	PreemptedBy string `json:"preemptedBy,omitempty"`
	// Gang is a TrainingJob's gang state (training.go).
	Gang *GangState `json:"gang,omitempty"`
	// FailedOver, set on the decision that moved a Pod out of a lost
	// cluster, is the message of its EventFailedOver (pod.go), so that
	// the event follows the committed decision like the others.
	FailedOver string `json:"failedOver,omitempty"`
}

// Shard is the part of a workload in one member cluster.
type Shard struct {
	// Cluster is the member cluster's name.
	Cluster string `json:"cluster"`
	// Zone is the cluster's zone.
	Zone string `json:"zone"`
	// Replicas is the number of pods (App: replicas; JobSet: parallelism).
	Replicas int32 `json:"replicas"`
	// IndexStart and IndexEnd (exclusive) are a JobSet shard's index range.
	IndexStart int32 `json:"indexStart,omitempty"`
	IndexEnd   int32 `json:"indexEnd,omitempty"`
	// PoolTier is PoolTierReserved when the shard's pods run on the
	// cluster's Reserved pools, empty on its shared pools.
	PoolTier string `json:"poolTier,omitempty"`
	// Attempt is a TrainingJob shard's gang attempt (GangState.Attempt).
	Attempt int32 `json:"attempt,omitempty"`
	// FireFrom is a CronJob shard's first schedule time it may fire (its
	// time fence, see KindCronJob): set when the shard moved here from
	// another cluster, zero on a first placement.
	FireFrom time.Time `json:"fireFrom,omitzero"`
}

// Rejection is one filter's verdict against one cluster.
type Rejection struct {
	Cluster string `json:"cluster"`
	Filter  string `json:"filter"`
	Reason  string `json:"reason"`
}

// Phases of a workload.
const (
	PhasePending     = "Pending"
	PhaseScheduled   = "Scheduled"
	PhaseRunning     = "Running"
	PhaseDegraded    = "Degraded"
	PhaseSucceeded   = "Succeeded"
	PhaseFailed      = "Failed"
	PhaseUnscheduled = "Unschedulable"
	PhaseProgressing = "Progressing"
	// PhasePaused: paused, and every shard has let its pods go (App) or
	// suspended its Job (JobSet).
	PhasePaused = "Paused"
	// PhaseStopped: stopped, and no object of it is left in any cluster.
	PhaseStopped = "Stopped"
)

// Status is the aggregator's view of one workload across its shards,
// stored in the status bucket under the workload's key.
type Status struct {
	Key string `json:"key"`
	// Generation of the workload the status was observed for.
	Generation int64 `json:"generation"`
	// Phase sums up the workload.
	Phase string `json:"phase"`
	// Desired is the total number of pods wanted (replicas, parallelism, 1).
	Desired int32 `json:"desired"`
	// Ready, Running, Succeeded and Failed count pods (indexes for JobSets).
	Ready     int32 `json:"ready"`
	Running   int32 `json:"running"`
	Succeeded int32 `json:"succeeded"`
	Failed    int32 `json:"failed"`
	// Zones has the counts per zone.
	Zones map[string]ZoneStatus `json:"zones,omitempty"`
	// Clusters has the counts per shard.
	Clusters map[string]ZoneStatus `json:"clusters,omitempty"`
	// Reasons, when unschedulable, say why per cluster and filter.
	Reasons []Rejection `json:"reasons,omitempty"`
	// Conditions are the latest notable facts.
	Conditions []Condition `json:"conditions,omitempty"`
	// ConfigVersions are, for an App, the content versions of the Configs
	// and Secrets its template rolls on ("Config/name" to a Config's
	// ContentHash or a Secret's Digest; PodTemplate.ConfigVersions).
	ConfigVersions map[string]string `json:"configVersions,omitempty"`
	// Events are the latest Kubernetes events of the workload's objects.
	Events []Event `json:"events,omitempty"`
	// Images are the images the running pods use, for rollouts.
	Images []string `json:"images,omitempty"`
	// CronJob is a CronJob's schedule and runs (cronjob.go).
	CronJob *CronJobStatus `json:"cronJob,omitempty"`
	// Daemon is a Daemon's DaemonSet counters, summed and per cluster (daemon.go).
	Daemon *DaemonStatus `json:"daemon,omitempty"`
	// Training is a TrainingJob's gang and ranks (training.go).
	Training *TrainingStatus `json:"training,omitempty"`
	// Pod is a Pod's containers and volume (pod.go).
	Pod *PodStatus `json:"pod,omitempty"`
	// Expose is an exposed App's host and its Ingresses' addresses (expose.go).
	Expose *ExposeStatus `json:"expose,omitempty"`
	// Queue, Position and PreemptedBy are the placement's (an
	// unschedulable workload's tier queue, its place there, who preempted
	// it), as of QueuedAt, the scheduler's decision time.
	Queue       string    `json:"queue,omitempty"`
	Position    int       `json:"position,omitempty"`
	PreemptedBy string    `json:"preemptedBy,omitempty"`
	QueuedAt    time.Time `json:"queuedAt,omitzero"`
	// Updated is when the status was last computed.
	Updated time.Time `json:"updated"`
}

// ZoneStatus counts pods in one zone or cluster.
type ZoneStatus struct {
	Desired   int32 `json:"desired"`
	Ready     int32 `json:"ready"`
	Running   int32 `json:"running"`
	Succeeded int32 `json:"succeeded,omitempty"`
	Failed    int32 `json:"failed,omitempty"`
	// ConfigVersions are, for an App, the content versions of the
	// Configs and Secrets its running pods there run ("Config/name" to
	// the versions, sorted: more than one while a change rolls out), read
	// from the pods' annotations (Status.ConfigVersions is what they roll to).
	ConfigVersions map[string][]string `json:"configVersions,omitempty"`
	// Templates counts an App's live pods by the template they run (its
	// api.TemplateHash, as the rollout's revisions): an in-place update
	// moves a pod from one to the next without replacing it.
	Templates map[string]int32 `json:"templates,omitempty"`
	// Sidecars counts, by SidecarImageKey (a native sidecar's name and
	// the image it reports running), the live pods that are ready with
	// that sidecar: the sidecar rollout's health gate per zone.
	Sidecars map[string]int32 `json:"sidecars,omitempty"`
}

// SidecarImageKey is the key of ZoneStatus.Sidecars for the sidecar name
// running image.
func SidecarImageKey(name, image string) string { return name + "=" + image }

// Condition is one fact about a workload.
type Condition struct {
	Type    string `json:"type"`
	Status  bool   `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Event is a Kubernetes event of one of the workload's objects.
type Event struct {
	Cluster string    `json:"cluster"`
	Object  string    `json:"object"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
}

// ClusterInfo is a member cluster's inventory and health, stored in the
// clusters bucket under the cluster's name.
type ClusterInfo struct {
	Name   string            `json:"name"`
	Zone   string            `json:"zone"`
	Labels map[string]string `json:"labels,omitempty"`
	// Healthy is false once the cluster has failed its probes for the grace period.
	Healthy bool `json:"healthy"`
	// LastSeen is the last successful probe.
	LastSeen time.Time `json:"lastSeen"`
	// Message explains an unhealthy cluster.
	Message string `json:"message,omitempty"`
	// Cordoned clusters take no new shards.
	Cordoned bool `json:"cordoned,omitempty"`
	// Admin holds what platform admins set (cordon, labels), merged into
	// Cordoned and Labels by the aggregator.
	Admin ClusterAdmin `json:"admin,omitzero"`
	// Taints of the cluster (platform-set), matched against tolerations.
	Taints []Toleration `json:"taints,omitempty"`
	// Pools hold capacity per node pool.
	Pools map[string]PoolInfo `json:"pools,omitempty"`
	// Updated is when the inventory was computed.
	Updated time.Time `json:"updated"`
}

// PoolInfo is the capacity of one node pool.
type PoolInfo struct {
	Nodes       int        `json:"nodes"`
	ReadyNodes  int        `json:"readyNodes"`
	Tier        string     `json:"tier,omitempty"`
	GPUType     string     `json:"gpuType,omitempty"`
	Allocatable Quantities `json:"allocatable"`
	Requested   Quantities `json:"requested"`
	// AllocatablePods and RequestedPods count pod slots.
	AllocatablePods int64 `json:"allocatablePods"`
	RequestedPods   int64 `json:"requestedPods"`
	// MaxNodeFree is the largest free amount on any one node, per resource.
	MaxNodeFree Quantities `json:"maxNodeFree"`
}

// Labels the platform sets on every native object it creates.
const (
	LabelManaged    = "atoll.dev/managed"
	LabelProject    = "atoll.dev/project"
	LabelKind       = "atoll.dev/kind"
	LabelWorkload   = "atoll.dev/workload"
	LabelTier       = "atoll.dev/tier"
	LabelShard      = "atoll.dev/shard"
	AnnoGeneration  = "atoll.dev/generation"
	AnnoIndexRange  = "atoll.dev/index-range"
	NodeLabelPool   = "atoll.dev/pool"
	NodeLabelTier   = "atoll.dev/tier"
	NodeLabelGPU    = "atoll.dev/gpu-type"
	NodeLabelZone   = "topology.kubernetes.io/zone"
	ResourceGPUName = "nvidia.com/gpu"
)

// KindLabel is a kind as written in label values: lower case.
func KindLabel(kind string) string { return strings.ToLower(kind) }
