package aggregator

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

func TestFoldExpose(t *testing.T) {
	app := func(e *api.Expose) *api.Workload {
		return &api.Workload{Kind: api.KindApp, Spec: &api.AppSpec{Expose: e}}
	}
	shard := func(cluster, zone string, ing *ingressObservation) shardView {
		return shardView{cluster: cluster, zone: zone, obs: observation{Part: &appPart{Ingress: ing}}}
	}
	exposed := &api.Expose{Host: "web.example.com", Path: "/", Port: "http"}
	for _, tc := range []struct {
		name   string
		w      *api.Workload
		shards []shardView
		want   *api.ExposeStatus
	}{
		{"not exposed", app(nil), []shardView{shard("c1", "a", nil)}, nil},
		{"no Ingress yet", app(exposed), []shardView{shard("c1", "a", nil)}, &api.ExposeStatus{Host: "web.example.com", Path: "/"}},
		{"Ingresses, one with an address", app(exposed), []shardView{
			shard("c1", "a", &ingressObservation{Host: "web.example.com", Addresses: []api.IngressAddress{{IP: "192.0.2.1"}}}),
			shard("c2", "b", &ingressObservation{Host: "web.example.com"}),
		}, &api.ExposeStatus{Host: "web.example.com", Path: "/", Ingresses: 2, Addresses: []api.IngressAddress{{Cluster: "c1", Zone: "a", IP: "192.0.2.1"}}}},
		{"an Ingress of the old host is not counted", app(exposed), []shardView{
			shard("c1", "a", &ingressObservation{Host: "old.example.com", Addresses: []api.IngressAddress{{Hostname: "lb.example.net"}}}),
		}, &api.ExposeStatus{Host: "web.example.com", Path: "/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st api.Status
			foldExpose(tc.w, tc.shards, &st)
			if diff := cmp.Diff(tc.want, st.Expose); diff != "" {
				t.Errorf("expose (-want +got):\n%s", diff)
			}
		})
	}
}
