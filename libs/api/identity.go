package api

import "slices"

// The platform's identity in every pod of every kind: where it runs and
// what it is, in its environment and its labels, so that a process knows
// its region, zone, cluster, project, kind and workload without asking
// (Pinterest's "runtime support"). The propagator sets them; a user
// variable of one of these names is refused (Invalid, a 422).
const (
	EnvRegion   = "ATOLL_REGION"   // the region's name
	EnvZone     = "ATOLL_ZONE"     // the member cluster's zone
	EnvCluster  = "ATOLL_CLUSTER"  // the member cluster's name
	EnvProject  = "ATOLL_PROJECT"  // the workload's project
	EnvKind     = "ATOLL_KIND"     // the workload's kind (App, JobSet, ...)
	EnvWorkload = "ATOLL_WORKLOAD" // the workload's name

	// Through the downward API.
	EnvPodName      = "POD_NAME"      // metadata.name
	EnvPodNamespace = "POD_NAMESPACE" // metadata.namespace
	EnvPodIP        = "POD_IP"        // status.podIP
	EnvNodeName     = "NODE_NAME"     // spec.nodeName
)

// LabelZone on a pod is its member cluster's zone (with LabelProject,
// LabelKind and LabelWorkload, the pod's identity in its labels).
const LabelZone = "atoll.dev/zone"

// IdentityEnv lists the variables the platform sets in every container,
// in the order it sets them.
var IdentityEnv = []string{
	EnvRegion, EnvZone, EnvCluster, EnvProject, EnvKind, EnvWorkload,
	EnvPodName, EnvPodNamespace, EnvPodIP, EnvNodeName,
}

// IsIdentityEnv reports whether name is one of IdentityEnv.
func IsIdentityEnv(name string) bool { return slices.Contains(IdentityEnv, name) }
