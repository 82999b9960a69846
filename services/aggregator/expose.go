package aggregator

import (
	networkingv1 "k8s.io/api/networking/v1"

	"atoll.dev/libs/api"
)

// An exposed App's Ingresses (rendered by the propagator, one per member
// cluster that runs the App): a cluster's observation of the App holds
// its Ingress's load-balancer addresses, as the cluster's ingress
// controller fills them, and the App's status gathers them per cluster
// (api.ExposeStatus).

var ingresses = networkingv1.SchemeGroupVersion.WithResource("ingresses")

// ingressObservation is what a cluster holds of an App's Ingress.
type ingressObservation struct {
	// Host is the Ingress's first rule's host.
	Host string `json:"host,omitempty"`
	// Addresses are its load balancer's, in the controller's order.
	Addresses []api.IngressAddress `json:"addresses,omitempty"`
}

// ingress observes the App's Ingress named name, nil when there is none.
func (t *clusterTerm) ingress(key, name string) *ingressObservation {
	for _, o := range t.objectsOf(ingresses, key) {
		ing, ok := o.(*networkingv1.Ingress)
		if !ok || ing.Name != name {
			continue
		}
		obs := &ingressObservation{}
		if len(ing.Spec.Rules) > 0 {
			obs.Host = ing.Spec.Rules[0].Host
		}
		for _, lb := range ing.Status.LoadBalancer.Ingress {
			obs.Addresses = append(obs.Addresses, api.IngressAddress{IP: lb.IP, Hostname: lb.Hostname})
		}
		return obs
	}
	return nil
}

// foldExpose sets an exposed App's st.Expose from its shards' Ingresses.
func foldExpose(w *api.Workload, shards []shardView, st *api.Status) {
	s, ok := w.Spec.(*api.AppSpec)
	if !ok || s.Expose == nil {
		return
	}
	ex := &api.ExposeStatus{Host: s.Expose.Host, Path: s.Expose.Path}
	for _, sh := range shards {
		ing := partOf[appPart](sh.obs).Ingress
		if ing == nil || ing.Host != s.Expose.Host {
			continue
		}
		ex.Ingresses++
		for _, a := range ing.Addresses {
			a.Cluster, a.Zone = sh.cluster, sh.zone
			ex.Addresses = append(ex.Addresses, a)
		}
	}
	st.Expose = ex
}
