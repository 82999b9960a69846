package propagator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// The region-wide address of an App (Karmada's MultiClusterService
// pattern). In every member cluster that runs the App, its Service
// (service.go) also reaches the ready pods of the other clusters: this
// file writes there one EndpointSlice per other cluster that has ready
// pods, labelled with the Service's name and managed-by atoll.dev, so
// that the cluster's own EndpointSlice controller leaves them alone and
// kube-proxy and cluster DNS merge them with the cluster's own. Each
// endpoint carries its zone and a hint for it: with the Service's
// trafficDistribution PreferClose, clients keep to their own zone's
// endpoints while it has any.
//
// Who does what. The aggregator observes pods (it watches every member
// cluster already) and writes each App's endpoints per cluster into its
// observations (api.EndpointsObservation); the propagator, the one
// service that writes to member clusters, mirrors those observations and
// the clusters' health, and the holder of each cluster's lease writes
// that cluster's managed slices. No new bucket, no second writer to a
// member cluster, no second watcher of pods.
//
// Endpoints follow readiness and scale (a new observation), placement
// (the App leaves a cluster: its slices there go, and its endpoints
// leave the others) and cluster loss: a cluster the aggregator marks
// unhealthy contributes no endpoints until it is healthy again, however
// stale its last observation.

// endpointsResync is how often a term recomputes its managed slices
// without a change (and retries after a failed write).
const endpointsResync = 15 * time.Second

var endpointSlices = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")

// startEndpointMirrors mirrors the Apps' observations and the clusters'
// health; a change kicks every term's endpoint loop.
func (s *Service) startEndpointMirrors(ctx context.Context) error {
	var err error
	decodeEndpoints := func(b []byte) (api.EndpointsObservation, error) {
		var o api.EndpointsObservation
		return o, json.Unmarshal(b, &o)
	}
	// Observation keys are <cluster>.<project>.<kind>.<name>.
	if s.endpoints, err = bus.MirrorOf(ctx, s.bus, bus.BucketObservations, "*.*.app.*", decodeEndpoints, s.kickEndpoints); err != nil {
		return err
	}
	if s.health, err = bus.MirrorOf(ctx, s.bus, bus.BucketClusters, "*", decodeCluster, s.healthChanged); err != nil {
		return err
	}
	return nil
}

// decodeCluster decodes a record of the clusters bucket.
func decodeCluster(b []byte) (api.ClusterInfo, error) {
	var c api.ClusterInfo
	return c, json.Unmarshal(b, &c)
}

// kickEndpoints wakes every term's endpoint loop.
func (s *Service) kickEndpoints(string) {
	for _, t := range s.targets {
		select {
		case t.endpointsKick <- struct{}{}:
		default:
		}
	}
}

// healthChanged wakes every term's endpoint loop when cluster's health
// (healthy) is not what it was: the aggregator rewrites each cluster's
// record at least every 10 s (its LastSeen), and a wake-up for each of
// those made the endpoint loops run about once a second with nothing
// changed.
func (s *Service) healthChanged(cluster string) {
	now := s.healthy(cluster)
	s.healthMu.Lock()
	was, seen := s.healthyWas[cluster]
	if s.healthyWas == nil {
		s.healthyWas = map[string]bool{}
	}
	s.healthyWas[cluster] = now
	s.healthMu.Unlock()
	if !seen || was != now {
		s.kickEndpoints(cluster)
	}
}

// workloadChanged keeps the serving index and passes the change on to the
// Config and Secret copies (configsync.go).
func (s *Service) workloadChanged(key string) {
	e, ok := s.workloads.Get(key)
	s.serving.note(key, ok && isAppKey(key) && bytes.Contains(e.Value, portsField))
	s.configChanged(key)
}

// servingIndex is the set of App keys whose document names a port
// (portsField): the endpoint loops go over these instead of every
// placement, so that their cost follows the Apps that serve, not the
// region (at 100,000 workloads, a pass over every placement every 15 s
// per cluster cost the propagator about 8% of a core with nothing
// submitted; with the wake-ups on every cluster record, 11%).
type servingIndex struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// note records whether key names a port.
func (x *servingIndex) note(key string, serving bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !serving {
		delete(x.keys, key)
		return
	}
	if x.keys == nil {
		x.keys = map[string]struct{}{}
	}
	x.keys[key] = struct{}{}
}

// list returns the keys.
func (x *servingIndex) list() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Collect(maps.Keys(x.keys))
}

// healthy reports whether the aggregator counts cluster as healthy; a
// cluster it has not reported on yet is.
func (s *Service) healthy(cluster string) bool {
	e, ok := s.health.Get(cluster)
	return !ok || e.Err != nil || e.Value.Healthy
}

// writtenSlice is a managed slice this term wrote or found.
type writtenSlice struct {
	ns, name, key, hash string
}

// syncEndpoints keeps the cluster's managed EndpointSlices as the other
// clusters' observations say, for the term tt (appKind.lead).
func (t *target) syncEndpoints(ctx context.Context, tt *term) {
	written := map[string]writtenSlice{} // by ns/name
	listed := false
	tick := time.NewTicker(endpointsResync)
	defer tick.Stop()
	for {
		if !listed {
			listed = t.listManagedSlices(ctx, written) == nil
		}
		if listed {
			t.writeSlices(ctx, written)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.endpointsKick:
		case <-tick.C:
		}
	}
}

// listManagedSlices finds the slices an earlier term left, so that those
// no longer wanted are deleted.
func (t *target) listManagedSlices(ctx context.Context, written map[string]writtenSlice) error {
	var list *discoveryv1.EndpointSliceList
	err := t.call(func() error {
		var err error
		list, err = t.cs.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: api.LabelEndpointSliceManagedBy + "=" + api.ManagedByAtoll})
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("cannot list managed endpoint slices", "err", err)
		}
		return err
	}
	for _, s := range list.Items {
		written[s.Namespace+"/"+s.Name] = writtenSlice{ns: s.Namespace, name: s.Name, key: appKeyOf(s.Labels), hash: s.Annotations[AnnoSpecHash]}
	}
	return nil
}

// writeSlices applies the wanted slices that changed and deletes those
// no longer wanted. An App whose desired state cannot be read now keeps
// its slices as they are.
func (t *target) writeSlices(ctx context.Context, written map[string]writtenSlice) {
	want, keep := t.wantedSlices()
	for id, sl := range want {
		if written[id].hash == sl.Annotations[AnnoSpecHash] {
			continue
		}
		if err := t.applyBeside(ctx, endpointSlices, "endpointslice", sl.Namespace, sl.Name, sl); err != nil {
			if ctx.Err() == nil {
				t.log.Warn("cannot write endpoint slice", "slice", id, "err", err)
			}
			continue
		}
		written[id] = writtenSlice{ns: sl.Namespace, name: sl.Name, key: appKeyOf(sl.Labels), hash: sl.Annotations[AnnoSpecHash]}
	}
	for id, ws := range written {
		if _, ok := want[id]; ok || keep[ws.key] {
			continue
		}
		if err := t.delete(ctx, endpointSlices, ws.ns, ws.name); err != nil {
			if ctx.Err() == nil {
				t.log.Warn("cannot delete endpoint slice", "slice", id, "err", err)
			}
			continue
		}
		delete(written, id)
	}
}

// appKeyOf is the key of the App whose slice has these labels.
func appKeyOf(l map[string]string) string {
	return api.Key(l[api.LabelProject], api.KindApp, l[api.LabelWorkload])
}

// wantedSlices returns the managed slices this cluster should hold, by
// ns/name, and the keys of the Apps whose desired state is not readable
// now (their slices are kept).
func (t *target) wantedSlices() (map[string]*discoveryv1.EndpointSlice, map[string]bool) {
	want := map[string]*discoveryv1.EndpointSlice{}
	keep := map[string]bool{}
	for _, key := range t.s.serving.list() {
		d, err := t.s.desiredFor(key)
		if err != nil {
			keep[key] = true
			continue
		}
		if d.workload == nil || d.shard(t.name) == nil {
			continue
		}
		ports := servicePorts(d.workload.Spec.PodTemplate())
		if len(ports) == 0 {
			continue
		}
		for _, sh := range d.placement.Shards {
			if sh.Cluster == t.name || !t.s.healthy(sh.Cluster) {
				continue
			}
			e, ok := t.s.endpoints.Get(sh.Cluster + "." + key)
			if !ok || e.Err != nil {
				continue
			}
			if sl := managedSlice(d.workload, sh.Cluster, ports, e.Value.Endpoints); sl != nil {
				want[sl.Namespace+"/"+sl.Name] = sl
			}
		}
	}
	return want, keep
}

// portsField is in every workload document that declares a container
// port (api.Container's Ports).
var portsField = []byte(`"ports"`)

// isAppKey reports whether a workload key (<project>.<kind>.<name>) is an App's.
func isAppKey(key string) bool {
	_, kind, _, err := api.ParseKey(key)
	return err == nil && kind == api.KindApp
}

// ManagedSliceName is the name of the managed EndpointSlice of an App that
// carries the endpoints of source, another member cluster.
func ManagedSliceName(app, source string) string { return app + "-atoll-" + source }

// managedSlice is the slice carrying source's ready endpoints of w, nil
// when it has none. It is stamped: its hash says whether it changed.
func managedSlice(w *api.Workload, source string, ports []corev1.ServicePort, eps []api.Endpoint) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ManagedSliceName(w.Metadata.Name, source), Namespace: api.Namespace(w.Metadata.Project),
			Labels: map[string]string{
				discoveryv1.LabelServiceName:    w.Metadata.Name,
				api.LabelEndpointSliceManagedBy: api.ManagedByAtoll,
				api.LabelSourceCluster:          source,
				api.LabelManaged:                "true",
				api.LabelProject:                w.Metadata.Project,
				api.LabelKind:                   api.KindLabel(api.KindApp),
				api.LabelWorkload:               w.Metadata.Name,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, e := range eps {
		ip := net.ParseIP(e.IP)
		if !e.Ready || ip == nil {
			continue
		}
		if ip.To4() == nil {
			sl.AddressType = discoveryv1.AddressTypeIPv6 // a cluster is one family
		}
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.IP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			Zone:       ptr.To(e.Zone),
			Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: e.Zone}}},
		})
	}
	if len(sl.Endpoints) == 0 {
		return nil
	}
	for _, p := range ports {
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(p.Port), Protocol: ptr.To(p.Protocol), AppProtocol: p.AppProtocol})
	}
	body, _ := json.Marshal(sl)
	sum := sha256.Sum256(body)
	sl.Annotations = map[string]string{AnnoSpecHash: hex.EncodeToString(sum[:12])}
	return sl
}
