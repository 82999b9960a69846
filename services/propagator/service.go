package propagator

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// An App with named ports is a Service in every member cluster it runs
// in: named as the App, in the project's namespace, selecting exactly the
// App's pods (its kind and workload labels; the atoll.dev/ labels are
// reserved, so no other pod carries them), one Service port per named
// container port. It is applied beside the shard's Deployment, so a port
// change (a template change, a new hash) reaches it, and deleted with the
// shard or when the App has no named port left. Its traffic distribution
// is PreferClose: a client is sent to an endpoint of its own zone when
// there is one (endpoints.go adds the other clusters' endpoints).

// renderAppService makes a shard's Service; nil when the App has no named
// port. Only the main containers' ports count: sidecars are the
// platform's.
func renderAppService(w *api.Workload, sh api.Shard) *corev1.Service {
	ports := servicePorts(w.Spec.PodTemplate())
	if len(ports) == 0 {
		return nil
	}
	m := meta(w, sh)
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels},
		Spec: corev1.ServiceSpec{
			Selector:            selector(w),
			Ports:               ports,
			TrafficDistribution: ptr.To(corev1.ServiceTrafficDistributionPreferClose),
		},
	}
}

// servicePorts are the Service ports of t's named container ports, the
// Service port being the container's, the target its name.
func servicePorts(t *api.PodTemplate) []corev1.ServicePort {
	var out []corev1.ServicePort
	for _, c := range t.Containers {
		for _, p := range c.Ports {
			if p.Name == "" {
				continue
			}
			sp := corev1.ServicePort{Name: p.Name, Port: p.ContainerPort, TargetPort: intstr.FromString(p.Name), Protocol: corev1.ProtocolTCP}
			if p.Protocol != "" {
				sp.Protocol = corev1.Protocol(p.Protocol)
			}
			if p.AppProtocol != "" {
				sp.AppProtocol = ptr.To(p.AppProtocol)
			}
			out = append(out, sp)
		}
	}
	return out
}

// AnnoService on an App's Deployment says the shard has a Service, so
// that the Service of an App whose last named port went is deleted, and
// only then: an App without ports costs no request for a Service.
const AnnoService = "atoll.dev/service"

// applyAppService applies sh's Service, when the App has a named port.
func (t *target) applyAppService(ctx context.Context, w *api.Workload, sh api.Shard, ns string) error {
	svc := renderAppService(w, sh)
	if svc == nil {
		return nil
	}
	return t.applyBeside(ctx, services, "service", ns, svc.Name, svc)
}

// dropAppService deletes sh's Service when the App has no named port
// any more, before its Deployment is applied: the live Deployment, as
// the informer holds it, says whether there was one.
func (t *target) dropAppService(ctx context.Context, w *api.Workload, sh api.Shard, ns string) error {
	if renderAppService(w, sh) != nil {
		return nil
	}
	obj, ok := t.liveObject(api.KindApp, ns, w.Metadata.Name)
	if !ok {
		return nil
	}
	if m, isMeta := obj.(metav1.Object); !isMeta || m.GetAnnotations()[AnnoService] != "true" {
		return nil
	}
	return t.delete(ctx, services, ns, w.Metadata.Name)
}
