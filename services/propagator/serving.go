package propagator

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
)

// What every kind's pods get beyond what the kind renders: the container
// model of a real service (probes, hooks, working directory, the grace
// period) and the platform's identity (identity.go). It is added to the
// rendered main object in one place, desired.finish, so that no kind can
// forget it.

// podOf returns the pod template's metadata and spec inside a rendered
// main object (the Pod itself for a Pod); nil, nil for an object that
// has no pods.
func podOf(obj any) (*metav1.ObjectMeta, *corev1.PodSpec) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *appsv1.StatefulSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *batchv1.Job:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *batchv1.CronJob:
		return &o.Spec.JobTemplate.Spec.Template.ObjectMeta, &o.Spec.JobTemplate.Spec.Template.Spec
	case *corev1.Pod:
		return &o.ObjectMeta, &o.Spec
	}
	return nil, nil
}

// finish adds the serving model and the identity to the pods of o, a
// rendered main object of sh.
func (d *desired) finish(o *object, sh api.Shard) {
	m, spec := podOf(o.obj)
	if spec == nil {
		return
	}
	w := d.zoneWorkload(sh)
	serve(spec, w.Spec.PodTemplate())
	identify(m, spec, identityOf(d.region, w, sh))
}

// serve copies the template's probes, hooks, working directories and
// grace period into spec, container by container (names are unique in a
// pod: init containers, sidecars and containers alike).
func serve(spec *corev1.PodSpec, t *api.PodTemplate) {
	if g := t.TerminationGracePeriodSeconds; g != nil {
		v := *g
		spec.TerminationGracePeriodSeconds = &v
	}
	byName := map[string]*api.Container{}
	for _, cs := range [][]api.Container{t.InitContainers, t.Sidecars, t.Containers} {
		for i := range cs {
			byName[cs[i].Name] = &cs[i]
		}
	}
	for _, ks := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range ks {
			if c := byName[ks[i].Name]; c != nil {
				serveContainer(&ks[i], c)
			}
		}
	}
}

func serveContainer(k *corev1.Container, c *api.Container) {
	k.WorkingDir = c.WorkingDir
	k.ReadinessProbe = probe(c.ReadinessProbe)
	k.LivenessProbe = probe(c.LivenessProbe)
	k.StartupProbe = probe(c.StartupProbe)
	if l := c.Lifecycle; l != nil {
		k.Lifecycle = &corev1.Lifecycle{PostStart: hook(l.PostStart), PreStop: hook(l.PreStop)}
	}
}

func probe(p *api.Probe) *corev1.Probe {
	if p == nil {
		return nil
	}
	k := &corev1.Probe{
		InitialDelaySeconds: p.InitialDelaySeconds,
		PeriodSeconds:       p.PeriodSeconds,
		TimeoutSeconds:      p.TimeoutSeconds,
		SuccessThreshold:    p.SuccessThreshold,
		FailureThreshold:    p.FailureThreshold,
	}
	switch {
	case p.HTTPGet != nil:
		k.HTTPGet = httpGet(p.HTTPGet)
	case p.TCPSocket != nil:
		k.TCPSocket = &corev1.TCPSocketAction{Port: p.TCPSocket.Port}
	case p.GRPC != nil:
		k.GRPC = &corev1.GRPCAction{Port: p.GRPC.Port}
		if p.GRPC.Service != "" {
			svc := p.GRPC.Service
			k.GRPC.Service = &svc
		}
	case p.Exec != nil:
		k.Exec = &corev1.ExecAction{Command: p.Exec.Command}
	}
	return k
}

func hook(h *api.LifecycleHandler) *corev1.LifecycleHandler {
	if h == nil {
		return nil
	}
	k := &corev1.LifecycleHandler{}
	switch {
	case h.Exec != nil:
		k.Exec = &corev1.ExecAction{Command: h.Exec.Command}
	case h.HTTPGet != nil:
		k.HTTPGet = httpGet(h.HTTPGet)
	case h.Sleep != nil:
		k.Sleep = &corev1.SleepAction{Seconds: h.Sleep.Seconds}
	}
	return k
}

func httpGet(a *api.HTTPGetAction) *corev1.HTTPGetAction {
	path := a.Path
	if path == "" {
		path = "/"
	}
	scheme := corev1.URISchemeHTTP
	if a.Scheme != "" {
		scheme = corev1.URIScheme(a.Scheme)
	}
	return &corev1.HTTPGetAction{Path: path, Port: a.Port, Scheme: scheme}
}
