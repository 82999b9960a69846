package propagator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

func TestRenderAppService(t *testing.T) {
	sh := api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 2}
	app := func(cs ...api.Container) *api.Workload {
		s := &api.AppSpec{Common: api.Common{Template: api.PodTemplate{Containers: cs, Sidecars: []api.Container{{Name: "mesh", Image: "envoy", Ports: []api.Port{{Name: "admin", ContainerPort: 15000}}}}}}}
		s.Default()
		return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp, Metadata: api.Metadata{Project: "shop", Name: "web", Generation: 1}, Spec: s}
	}
	tests := []struct {
		name  string
		w     *api.Workload
		ports []corev1.ServicePort // nil: no Service
	}{
		{"no ports, no Service", app(api.Container{Name: "c", Image: "i"}), nil},
		{"unnamed ports, no Service", app(api.Container{Name: "c", Image: "i", Ports: []api.Port{{ContainerPort: 80}}}), nil},
		{"named ports of every container", app(
			api.Container{Name: "c", Image: "i", Ports: []api.Port{{Name: "http", ContainerPort: 8080, AppProtocol: "http"}, {ContainerPort: 9}}},
			api.Container{Name: "d", Image: "i", Ports: []api.Port{{Name: "dns", ContainerPort: 53, Protocol: "UDP"}}},
		), []corev1.ServicePort{
			{Name: "http", Port: 8080, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http")},
			{Name: "dns", Port: 53, TargetPort: intstr.FromString("dns"), Protocol: corev1.ProtocolUDP},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := renderAppService(tc.w, sh)
			if tc.ports == nil {
				if svc != nil {
					t.Fatalf("a Service with ports %v", svc.Spec.Ports)
				}
				return
			}
			if svc == nil {
				t.Fatal("no Service")
			}
			if diff := cmp.Diff(tc.ports, svc.Spec.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			want := map[string]string{api.LabelKind: "app", api.LabelWorkload: "web"}
			if diff := cmp.Diff(want, svc.Spec.Selector); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
			if svc.Name != "web" || svc.Namespace != api.Namespace("shop") {
				t.Errorf("Service %s/%s, want %s/web", svc.Namespace, svc.Name, api.Namespace("shop"))
			}
			if td := svc.Spec.TrafficDistribution; td == nil || *td != corev1.ServiceTrafficDistributionPreferClose {
				t.Errorf("trafficDistribution %v, want PreferClose", td)
			}
		})
	}
}
