package gateway

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
)

// GetEndpoints serves an App's endpoints per zone and cluster: its Service
// ports from its template, and its pods' addresses as the aggregator
// observes them in each member cluster (the observations bucket, keys
// <cluster>.<workload key>), the same observations the propagator writes
// the region-wide EndpointSlices from.
func (s *Service) GetEndpoints(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath, kind computeapi.KindPath, name computeapi.NamePath) {
	item, key, registered, ok := s.workloadItem(w, r, project, kind, name, auth.RoleViewer)
	if !ok {
		return
	}
	if registered != api.KindApp {
		writeError(w, r, http.StatusNotFound, "NotFound", "only an App has endpoints")
		return
	}
	var doc struct {
		Spec struct {
			Template api.PodTemplate `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(item.JSON, &doc); err != nil {
		writeError(w, r, http.StatusInternalServerError, "Internal", "undecodable workload: "+err.Error())
		return
	}
	out := computeapi.Endpoints{Ports: []computeapi.ServicePort{}, Endpoints: []computeapi.Endpoint{}}
	for _, c := range doc.Spec.Template.Containers {
		for _, p := range c.Ports {
			if p.Name == "" {
				continue
			}
			sp := computeapi.ServicePort{Name: p.Name, Port: p.ContainerPort, Protocol: computeapi.ServicePortProtocol(cmp.Or(p.Protocol, "TCP"))}
			if p.AppProtocol != "" {
				sp.AppProtocol = p.AppProtocol
			}
			out.Ports = append(out.Ports, sp)
		}
	}
	if len(out.Ports) > 0 {
		out.Address = name + "." + api.Namespace(project) + ".svc.cluster.local"
	}
	eps, err := s.observedEndpoints(r, key)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	for _, e := range eps {
		ce := computeapi.Endpoint{Zone: e.Zone, Cluster: e.Cluster, Pod: e.Pod, Ip: e.IP, Ready: e.Ready}
		if e.Node != "" {
			ce.Node = e.Node
		}
		out.Endpoints = append(out.Endpoints, ce)
	}
	writeJSON(w, http.StatusOK, out)
}

// observedEndpoints reads key's endpoints from every cluster's
// observation, sorted by zone, cluster and pod.
func (s *Service) observedEndpoints(r *http.Request, key string) ([]api.Endpoint, error) {
	kv, err := s.js.KeyValue(r.Context(), bus.BucketObservations)
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeysFiltered(r.Context(), "*."+key)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var out []api.Endpoint
	for _, k := range keys {
		e, err := kv.Get(r.Context(), k)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var obs api.EndpointsObservation
		if json.Unmarshal(e.Value(), &obs) != nil {
			continue
		}
		out = append(out, obs.Endpoints...)
	}
	slices.SortFunc(out, func(a, b api.Endpoint) int {
		return cmp.Or(strings.Compare(a.Zone, b.Zone), strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.Pod, b.Pod))
	})
	return out, nil
}
