package propagator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

func TestRenderIngress(t *testing.T) {
	sh := api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 2}
	app := func(e *api.Expose) *api.Workload {
		s := &api.AppSpec{Expose: e, Common: api.Common{Template: api.PodTemplate{Containers: []api.Container{
			{Name: "c", Image: "i", Ports: []api.Port{{Name: "http", ContainerPort: 8080}}},
		}}}}
		s.Default()
		return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp, Metadata: api.Metadata{Project: "shop", Name: "web", Generation: 1}, Spec: s}
	}
	rule := func(host, path string) []networkingv1.IngressRule {
		return []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: path, PathType: ptr.To(networkingv1.PathTypePrefix), Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}},
			}}},
		}}}}
	}
	tests := []struct {
		name  string
		w     *api.Workload
		class string
		want  *networkingv1.IngressSpec // nil: no Ingress
		anno  string
	}{
		{"not exposed, no Ingress", app(nil), "atoll", nil, ""},
		{"default path", app(&api.Expose{Host: "web.example.com", Port: "http"}), "atoll",
			&networkingv1.IngressSpec{IngressClassName: ptr.To("atoll"), Rules: rule("web.example.com", "/")}, "web.example.com/ -> http"},
		{"a path and the operator's class", app(&api.Expose{Host: "a.b", Path: "/api", Port: "http"}), "nginx",
			&networkingv1.IngressSpec{IngressClassName: ptr.To("nginx"), Rules: rule("a.b", "/api")}, "a.b/api -> http"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ing := renderIngress(tc.w, sh, tc.class)
			if got := exposeOf(tc.w.Spec.(*api.AppSpec)); got != tc.anno {
				t.Errorf("%s = %q, want %q", AnnoExpose, got, tc.anno)
			}
			if got := renderApp(tc.w, sh).obj.(interface{ GetAnnotations() map[string]string }).GetAnnotations()[AnnoExpose]; got != tc.anno {
				t.Errorf("Deployment's %s = %q, want %q", AnnoExpose, got, tc.anno)
			}
			if tc.want == nil {
				if ing != nil {
					t.Fatalf("an Ingress: %+v", ing.Spec)
				}
				return
			}
			if ing == nil {
				t.Fatal("no Ingress")
			}
			if diff := cmp.Diff(tc.want, &ing.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
			if ing.Name != "web" || ing.Namespace != api.Namespace("shop") || ing.Labels[api.LabelWorkload] != "web" {
				t.Errorf("Ingress %s/%s labels %v, want %s/web labelled as the App", ing.Namespace, ing.Name, ing.Labels, api.Namespace("shop"))
			}
		})
	}
}
