package api

// Endpoint is one pod of an App as a member cluster serves it: the
// aggregator observes them (the `endpoints` of an App's observation in
// the observations bucket, key <cluster>.<workload key>); the propagator
// writes the other clusters' into each cluster's managed EndpointSlices;
// the API lists them per zone and cluster.
type Endpoint struct {
	// Pod is the pod's name.
	Pod string `json:"pod"`
	// IP is the pod's address.
	IP string `json:"ip"`
	// Node is the node the pod runs on.
	Node string `json:"node,omitempty"`
	// Zone is the zone of the pod's member cluster.
	Zone string `json:"zone"`
	// Cluster is the pod's member cluster.
	Cluster string `json:"cluster"`
	// Ready is the pod's Ready condition: every container's readiness
	// probe passes. Only ready endpoints receive traffic.
	Ready bool `json:"ready"`
}

// EndpointsObservation is the part of a cluster's observation of an App
// that the propagator reads: its pods' endpoints, sorted by pod name, at
// most MaxClusterEndpoints of them.
type EndpointsObservation struct {
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	// EndpointsLeftOut counts the endpoints beyond MaxClusterEndpoints.
	EndpointsLeftOut int `json:"endpointsLeftOut,omitempty"`
}

// MaxClusterEndpoints bounds the endpoints of one App observed in one
// member cluster: one EndpointSlice's maximum, which is what the other
// clusters get of it, and what keeps an observation well under a NATS
// message's size.
const MaxClusterEndpoints = 1000

// Labels of the EndpointSlices Atoll writes for an App's region-wide
// address (Karmada's MultiClusterService pattern).
const (
	// LabelEndpointSliceManagedBy is Kubernetes' label naming the
	// controller of an EndpointSlice; ManagedByAtoll is Atoll's value, so
	// that the cluster's own EndpointSlice controller leaves them alone.
	LabelEndpointSliceManagedBy = "endpointslice.kubernetes.io/managed-by"
	ManagedByAtoll              = "atoll.dev"
	// LabelSourceCluster names the member cluster whose endpoints a
	// managed EndpointSlice carries.
	LabelSourceCluster = "atoll.dev/source-cluster"
)
