package aggregator

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/clusters"
)

func endpointPod(name, ip string, ready bool, deleting bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if deleting {
		p.DeletionTimestamp = &metav1.Time{}
	}
	return p
}

func TestObservedEndpoints(t *testing.T) {
	tt := &clusterTerm{c: &cluster{member: clusters.Member{Name: "zone-b", Zone: "b"}}}
	pending := endpointPod("p", "", false, false)
	pending.Status.Phase = corev1.PodPending
	got := tt.endpoints(views([]*corev1.Pod{
		endpointPod("web-2", "10.0.0.2", false, false),
		endpointPod("web-1", "10.0.0.1", true, false),
		endpointPod("web-3", "10.0.0.3", true, true), // terminating
		pending,
	}))
	want := api.EndpointsObservation{Endpoints: []api.Endpoint{
		{Pod: "web-1", IP: "10.0.0.1", Node: "n1", Zone: "b", Cluster: "zone-b", Ready: true},
		{Pod: "web-2", IP: "10.0.0.2", Node: "n1", Zone: "b", Cluster: "zone-b"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
}

// TestObservedEndpointsBounded: beyond the bound, ready endpoints are kept
// first and the rest counted.
func TestObservedEndpointsBounded(t *testing.T) {
	tt := &clusterTerm{c: &cluster{member: clusters.Member{Name: "zone-a", Zone: "a"}}}
	var pods []*corev1.Pod
	for i := range api.MaxClusterEndpoints + 10 {
		pods = append(pods, endpointPod(fmt.Sprintf("web-%05d", i), fmt.Sprintf("10.%d.%d.1", i/256, i%256), i >= 10, false))
	}
	got := tt.endpoints(views(pods))
	if len(got.Endpoints) != api.MaxClusterEndpoints || got.EndpointsLeftOut != 10 {
		t.Fatalf("%d endpoints, %d left out", len(got.Endpoints), got.EndpointsLeftOut)
	}
	for _, e := range got.Endpoints {
		if !e.Ready {
			t.Fatalf("not-ready %s kept while ready ones were left out", e.Pod)
		}
	}
}
