package aggregator

import (
	"slices"
	"strings"

	"atoll.dev/libs/api"
)

// An App's endpoints in a member cluster: every pod that has an address
// and is not terminating, ready or not, with the cluster's zone. The
// observation carries them to the propagator, which writes the other
// clusters' ready ones into this cluster's managed EndpointSlices, and
// to the status folding, which lists them in the API. Terminating pods
// are left out: their endpoints leave the address as soon as they stop.

// endpoints returns the endpoints of an App's pods in the term's
// cluster, sorted by pod name, ready ones first when there are more than
// api.MaxClusterEndpoints (those beyond are counted, not listed).
func (t *clusterTerm) endpoints(pods []*podView) api.EndpointsObservation {
	var out []api.Endpoint
	for _, p := range pods {
		if !p.running() || p.IP == "" {
			continue
		}
		out = append(out, api.Endpoint{
			Pod: p.Name, IP: p.IP, Node: p.Node.String(),
			Zone: t.c.member.Zone, Cluster: t.c.member.Name, Ready: podReady(p),
		})
	}
	slices.SortFunc(out, func(a, b api.Endpoint) int { return strings.Compare(a.Pod, b.Pod) })
	var left int
	if len(out) > api.MaxClusterEndpoints {
		slices.SortStableFunc(out, func(a, b api.Endpoint) int {
			switch {
			case a.Ready == b.Ready:
				return 0
			case a.Ready:
				return -1
			}
			return 1
		})
		left = len(out) - api.MaxClusterEndpoints
		out = out[:api.MaxClusterEndpoints]
		slices.SortFunc(out, func(a, b api.Endpoint) int { return strings.Compare(a.Pod, b.Pod) })
	}
	return api.EndpointsObservation{Endpoints: out, EndpointsLeftOut: left}
}
