package propagator

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

func TestManagedSlice(t *testing.T) {
	w := &api.Workload{Kind: api.KindApp, Metadata: api.Metadata{Project: "shop", Name: "web"}}
	ports := []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http")}}
	ready := func(ip, zone string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Zone: ptr.To(zone),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}}}
	}
	tests := []struct {
		name string
		eps  []api.Endpoint
		want []discoveryv1.Endpoint // nil: no slice
		typ  discoveryv1.AddressType
	}{
		{"none", nil, nil, ""},
		{"none ready", []api.Endpoint{{Pod: "a", IP: "10.0.0.1", Zone: "b"}}, nil, ""},
		{"only the ready ones, with their zone", []api.Endpoint{{Pod: "a", IP: "10.0.0.1", Zone: "b", Ready: true}, {Pod: "b", IP: "10.0.0.2", Zone: "b"}, {Pod: "c", IP: "10.0.0.3", Zone: "b", Ready: true}},
			[]discoveryv1.Endpoint{ready("10.0.0.1", "b"), ready("10.0.0.3", "b")}, discoveryv1.AddressTypeIPv4},
		{"IPv6", []api.Endpoint{{Pod: "a", IP: "fd00::1", Zone: "c", Ready: true}}, []discoveryv1.Endpoint{ready("fd00::1", "c")}, discoveryv1.AddressTypeIPv6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sl := managedSlice(w, "zone-b", ports, tc.eps)
			if tc.want == nil {
				if sl != nil {
					t.Fatalf("a slice with %v", sl.Endpoints)
				}
				return
			}
			if sl == nil {
				t.Fatal("no slice")
			}
			if diff := cmp.Diff(tc.want, sl.Endpoints); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			if sl.AddressType != tc.typ {
				t.Errorf("address type %s, want %s", sl.AddressType, tc.typ)
			}
			wantPorts := []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP), AppProtocol: ptr.To("http")}}
			if diff := cmp.Diff(wantPorts, sl.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			for k, v := range map[string]string{discoveryv1.LabelServiceName: "web", api.LabelEndpointSliceManagedBy: api.ManagedByAtoll, api.LabelSourceCluster: "zone-b"} {
				if sl.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, sl.Labels[k], v)
				}
			}
			if sl.Name != "web-atoll-zone-b" || sl.Namespace != api.Namespace("shop") || sl.Annotations[AnnoSpecHash] == "" {
				t.Errorf("slice %s/%s hash %q", sl.Namespace, sl.Name, sl.Annotations[AnnoSpecHash])
			}
			if got := appKeyOf(sl.Labels); got != "shop.app.web" {
				t.Errorf("appKeyOf = %q", got)
			}
		})
	}
}

// TestEndpointLoopsLookOnlyAtWhatServes checks what wakes the endpoint
// loops and what they go over: a cluster's record rewritten with only its
// LastSeen moved wakes none (the aggregator rewrites each at least every
// 10 s); its health changing does; and the loops' keys are the Apps that
// name a port, followed as documents change.
func TestEndpointLoopsLookOnlyAtWhatServes(t *testing.T) {
	ctx := context.Background()
	b := openBus(t)
	kick := make(chan struct{}, 1)
	s := &Service{targets: map[string]*target{"zone-a": {name: "zone-a", endpointsKick: kick}}}
	var err error
	s.health, err = bus.MirrorOf(ctx, b, bus.BucketClusters, "*", decodeCluster, nil)
	require.NoError(t, err)
	t.Cleanup(s.health.Stop)
	s.workloads, err = b.Mirror(ctx, bus.BucketWorkloads, nil)
	require.NoError(t, err)
	t.Cleanup(s.workloads.Stop)

	clusters, err := b.KV(ctx, bus.BucketClusters)
	require.NoError(t, err)
	woke := func() bool {
		select {
		case <-kick:
			return true
		default:
			return false
		}
	}
	for _, step := range []struct {
		name    string
		healthy bool
		wakes   bool
	}{
		{"first record", true, true},
		{"LastSeen moved", true, false},
		{"LastSeen moved again", true, false},
		{"unhealthy", false, true},
		{"still unhealthy", false, false},
		{"healthy again", true, true},
	} {
		doc, err := json.Marshal(api.ClusterInfo{Name: "zone-b", Healthy: step.healthy, LastSeen: time.Now()})
		require.NoError(t, err)
		rev, err := clusters.Put(ctx, "zone-b", doc)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			e, ok := s.health.Get("zone-b")
			return ok && e.Revision == rev
		}, 10*time.Second, 5*time.Millisecond)
		s.healthChanged("zone-b")
		assert.Equal(t, step.wakes, woke(), "%s: the endpoint loop woken", step.name)
	}

	workloads, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	put := func(w *api.Workload) {
		t.Helper()
		doc, err := json.Marshal(w)
		require.NoError(t, err)
		key := api.Key(w.Metadata.Project, w.Kind, w.Metadata.Name)
		rev, err := workloads.Put(ctx, key, doc)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			e, ok := s.workloads.Get(key)
			return ok && e.Revision == rev
		}, 10*time.Second, 5*time.Millisecond)
		s.workloadChanged(key)
	}
	serving := app("web", 2)
	serving.Spec.(*api.AppSpec).Template.Containers[0].Ports = []api.Port{{Name: "http", ContainerPort: 8080}}
	put(serving)
	put(app("quiet", 2))
	assert.Equal(t, []string{api.Key("p", api.KindApp, "web")}, s.serving.list(), "Apps that name a port")
	serving.Spec.(*api.AppSpec).Template.Containers[0].Ports = nil
	put(serving)
	assert.Empty(t, s.serving.list(), "after the port is dropped")
}
