package propagator

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// An exposed App (spec.expose) is an Ingress in every member cluster it
// runs in: named as the App, in the project's namespace, routing the
// App's host and path (pathType Prefix) to the App's Service on the named
// port, with the region's ingress class (Config.IngressClass). It is
// applied beside the shard's Deployment and deleted with the shard, or
// when the App is no longer exposed (the live Deployment's AnnoExpose
// says whether it was). An ingress controller in the member cluster
// serves it and fills its status, which the aggregator folds into the
// App's status.

// DefaultIngressClass is the ingress class of the Ingresses the
// propagator renders when the operator names none (--ingress-class): the
// member clusters' ingress controller is expected to serve an
// IngressClass of that name.
const DefaultIngressClass = "atoll"

// AnnoExpose on an App's Deployment is its exposure ("host/path ->
// port"), so that the Ingress of an App no longer exposed is deleted, and
// only then.
const AnnoExpose = "atoll.dev/expose"

var ingresses = networkingv1.SchemeGroupVersion.WithResource("ingresses")

// exposeOf is the value of AnnoExpose for an App, "" when it is not exposed.
func exposeOf(s *api.AppSpec) string {
	if s.Expose == nil {
		return ""
	}
	return s.Expose.Host + s.Expose.Path + " -> " + s.Expose.Port
}

// renderIngress makes a shard's Ingress with ingress class class ("": the
// cluster's default class); nil when the App is not exposed.
func renderIngress(w *api.Workload, sh api.Shard, class string) *networkingv1.Ingress {
	s, ok := w.Spec.(*api.AppSpec)
	if !ok || s.Expose == nil {
		return nil
	}
	e := s.Expose
	m := meta(w, sh)
	ing := &networkingv1.Ingress{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels},
		Spec: networkingv1.IngressSpec{
			Rules: []networkingv1.IngressRule{{
				Host: e.Host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path:     e.Path,
						PathType: ptr.To(networkingv1.PathTypePrefix),
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: w.Metadata.Name,
							Port: networkingv1.ServiceBackendPort{Name: e.Port},
						}},
					}},
				}},
			}},
		},
	}
	if class != "" {
		ing.Spec.IngressClassName = ptr.To(class)
	}
	return ing
}

// applyIngress applies sh's Ingress, when the App is exposed.
func (t *target) applyIngress(ctx context.Context, w *api.Workload, sh api.Shard, ns string) error {
	ing := renderIngress(w, sh, t.s.ingressClass)
	if ing == nil {
		return nil
	}
	return t.applyBeside(ctx, ingresses, "ingress", ns, ing.Name, ing)
}

// dropIngress deletes sh's Ingress when the App is no longer exposed,
// before its Deployment is applied: the live Deployment, as the informer
// holds it, says whether it was.
func (t *target) dropIngress(ctx context.Context, w *api.Workload, ns string) error {
	if s, ok := w.Spec.(*api.AppSpec); !ok || s.Expose != nil {
		return nil
	}
	obj, ok := t.liveObject(api.KindApp, ns, w.Metadata.Name)
	if !ok {
		return nil
	}
	if m, isMeta := obj.(metav1.Object); !isMeta || m.GetAnnotations()[AnnoExpose] == "" {
		return nil
	}
	return t.delete(ctx, ingresses, ns, w.Metadata.Name)
}
