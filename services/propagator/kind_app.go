package propagator

import (
	"context"
	"reflect"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// The App: each shard is a Deployment, and a PodDisruptionBudget beside
// it. A paused App keeps its Deployments, held at zero replicas until it
// is resumed.
//
// Every App shard gets a PodDisruptionBudget next to its Deployment, of
// the same name, made from the App's availability budget (api.Availability,
// default api.DefaultMaxUnavailable), so that the drains of the
// remediation and upgrade services, which evict through the Eviction API,
// are application-aware. It is applied whenever the shard's Deployment is
// (the budget is stamped into the Deployment's annotations, so a budget
// change changes the shard's hash) and deleted with the shard.

var (
	deployments = appsv1.SchemeGroupVersion.WithResource("deployments")
	pdbs        = policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets")
)

// appKind is the App's part of the propagator.
type appKind struct{ basic }

func (appKind) resource() schema.GroupVersionResource { return deployments }

func (appKind) render(d *desired, sh api.Shard) object {
	zw := d.zoneWorkload(sh)
	o := renderApp(zw, sh)
	if rw := d.rolloutWorkload(sh); zw != rw {
		sidecarsHeldBack(&o, rw) // sidecars_zones.go
	}
	return o
}

func (appKind) create(ctx context.Context, _ *term, cs kubernetes.Interface, ns string, obj any, o metav1.CreateOptions) error {
	if ss, ok := obj.(*appsv1.StatefulSet); ok { // kind_app_stateful.go
		_, err := cs.AppsV1().StatefulSets(ns).Create(ctx, ss, o)
		return err
	}
	_, err := cs.AppsV1().Deployments(ns).Create(ctx, obj.(*appsv1.Deployment), o)
	return err
}

// before deletes the shard's Service when the App's last named port went
// (service.go), and its Ingress when the App is no longer exposed
// (expose.go).
func (appKind) before(ctx context.Context, t *target, w *api.Workload, sh api.Shard, ns string) error {
	if err := t.dropAppService(ctx, w, sh, ns); err != nil {
		return err
	}
	if err := t.dropOtherForm(ctx, w, ns); err != nil { // kind_app_stateful.go
		return err
	}
	return t.dropIngress(ctx, w, ns)
}

// beside applies the shard's PodDisruptionBudget, its Service (service.go)
// and its Ingress (expose.go).
func (appKind) beside(ctx context.Context, t *target, w *api.Workload, sh api.Shard, ns string) error {
	b := renderBudget(w, sh)
	if err := t.applyBeside(ctx, pdbs, "poddisruptionbudget", ns, b.Name, b); err != nil {
		return err
	}
	if err := t.applyAppService(ctx, w, sh, ns); err != nil {
		return err
	}
	return t.applyIngress(ctx, w, sh, ns)
}

// prepare moves a shard's pods in place when only images changed: the
// App's own containers' (updateStrategy InPlaceIfPossible,
// app_inplace.go), else only the managed sidecars' (sidecars_inplace.go).
// Each is a no-op when its change is not the one it moves.
func (appKind) prepare(ctx context.Context, t *target, o object, ns string) error {
	if err := t.updateAppInPlace(ctx, o, ns); err != nil {
		return err
	}
	return t.updateSidecarsInPlace(ctx, o, ns)
}

// lead keeps the cluster's managed EndpointSlices (endpoints.go).
func (appKind) lead(ctx context.Context, t *target, tt *term) { t.syncEndpoints(ctx, tt) }

func (appKind) owned(_, name string) []owned {
	return []owned{{deployments, name}, {statefulsets, name}, {pdbs, name}, {services, name}, {ingresses, name}}
}

// AnnoAvailability on an App's Deployment is its shard's budget
// ("maxUnavailable=25%"), which makes a budget change a new spec hash.
const AnnoAvailability = "atoll.dev/availability"

// availabilityOf is the value of AnnoAvailability for an App.
func availabilityOf(s *api.AppSpec) string {
	kind, v := s.Availability.Budget()
	return kind + "=" + v
}

// renderBudget makes a shard's PodDisruptionBudget.
func renderBudget(w *api.Workload, sh api.Shard) *policyv1.PodDisruptionBudget {
	s := w.Spec.(*api.AppSpec)
	kind, v := s.Availability.Budget()
	val := intstr.Parse(v)
	spec := policyv1.PodDisruptionBudgetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: selector(w)},
		// Pods not ready yet never hold a drain back.
		UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
	}
	if kind == "minAvailable" {
		spec.MinAvailable = &val
	} else {
		spec.MaxUnavailable = &val
	}
	m := meta(w, sh)
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels},
		Spec:       spec,
	}
}

// renderApp makes a shard's Deployment. A paused App keeps its
// Deployments, held at zero replicas until it is resumed.
func renderApp(w *api.Workload, sh api.Shard) object {
	s := w.Spec.(*api.AppSpec)
	replicas := sh.Replicas
	if w.Control.Paused {
		replicas = 0
	}
	m := meta(w, sh)
	m.Annotations[AnnoAvailability] = availabilityOf(s)
	m.Annotations[api.AnnoTemplate] = api.TemplateHash(&s.Template)
	if len(servicePorts(&s.Template)) > 0 {
		m.Annotations[AnnoService] = "true" // service.go
	}
	if e := exposeOf(s); e != "" {
		m.Annotations[AnnoExpose] = e // expose.go
	}
	if s.InPlace() {
		m.Annotations[AnnoUpdateStrategy] = s.UpdateStrategy // app_inplace.go
	}
	if stateful(w) {
		return renderStatefulApp(w, sh, m, replicas) // kind_app_stateful.go
	}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: m,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Paused:   s.Paused,
			Strategy: rollingUpdate(s, replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selector(w)},
			Template: podTemplate(w, sh, corev1.RestartPolicyAlways),
		},
	}
	if s.InPlace() {
		// Each pod says its revision; an in-place update moves it.
		d.Spec.Template.Annotations = annotated(d.Spec.Template.Annotations, map[string]string{api.AnnoTemplate: m.Annotations[api.AnnoTemplate]})
	}
	d.Annotations[AnnoPodShape] = podShape(&d.Spec.Template) // sidecars_inplace.go
	return object{gvr: deployments, name: d.Name, obj: d}
}

// zoneWorkload returns the workload as sh's zone runs it: an App's with
// the template its rollout gives that zone and the sidecars the sidecar
// rollout gives it (sidecars_zones.go); d.workload otherwise.
func (d *desired) zoneWorkload(sh api.Shard) *api.Workload {
	w := d.rolloutWorkload(sh)
	s, app := w.Spec.(*api.AppSpec)
	if !app {
		return w
	}
	// Every App's, moved or not: the App's rollout may still give the zone
	// a template whose sidecars the sidecar rollout has since taken back
	// (its rollback writes the previous version, and the App's rollout
	// takes that as stable only at its next step).
	sidecars, held := d.sidecars.HeldBack(d.workload, sh.Zone)
	if !held {
		sidecars = d.workload.Spec.PodTemplate().Sidecars
	}
	if reflect.DeepEqual(s.Template.Sidecars, sidecars) {
		return w
	}
	spec := *s
	spec.Template.Sidecars = sidecars
	zw := *w
	zw.Spec = &spec
	return &zw
}

// rolloutWorkload returns the workload with the template an App's
// rollout gives sh's zone; d.workload otherwise.
func (d *desired) rolloutWorkload(sh api.Shard) *api.Workload {
	w := d.workload
	s, ok := w.Spec.(*api.AppSpec)
	if !ok || d.rollout == nil {
		return w
	}
	t := d.rollout.TemplateFor(sh.Zone, &s.Template)
	if t == &s.Template {
		return w
	}
	spec := *s
	spec.Template = *t
	zw := *w
	zw.Spec = &spec
	return &zw
}

// rollingUpdate is an App Deployment's strategy: it never takes more of a
// shard's replicas out of service than the App's availability budget
// lets a drain take. Deployments round maxUnavailable down; the budget's
// PodDisruptionBudget rounds up, so the same value is never more. A
// minAvailable budget m becomes maxUnavailable 100%-m (a percentage) or
// replicas-m (a count). maxSurge stays Kubernetes' 25% (rounded up, so
// at least one new pod starts even when none may go).
func rollingUpdate(s *api.AppSpec, replicas int32) appsv1.DeploymentStrategy {
	kind, v := s.Availability.Budget()
	val := intstr.Parse(v)
	if kind == "minAvailable" {
		if val.Type == intstr.String {
			var p int
			if n, err := intstr.GetScaledValueFromIntOrPercent(&val, 100, true); err == nil {
				p = n
			}
			val = intstr.FromString(strconv.Itoa(max(0, 100-p)) + "%")
		} else {
			val = intstr.FromInt32(max(0, replicas-val.IntVal))
		}
	}
	surge := intstr.FromString("25%")
	return appsv1.DeploymentStrategy{
		Type:          appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &val, MaxSurge: &surge},
	}
}
