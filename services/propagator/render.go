package propagator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// object is one native object to apply for a shard.
type object struct {
	gvr  schema.GroupVersionResource
	name string
	obj  any // typed object with TypeMeta set, marshalled as the apply body
	// hash identifies what was rendered (see stamp); empty until stamped.
	hash string
}

// AnnoSpecHash on an object is the hash of what the propagator rendered
// for it, so that a restarted or new holder recognises an unchanged shard
// from its informer cache alone, without an API call.
const AnnoSpecHash = "atoll.dev/spec-hash"

// stamp computes the hash of o as rendered and writes it into o's
// annotations. encoding/json writes struct fields in order and map keys
// sorted, so the same render gives the same hash.
func stamp(o *object) {
	body, err := json.Marshal(o.obj)
	if err != nil {
		// Never for the typed objects the kinds render. A hash no live
		// object carries: each term applies the shard once.
		o.hash = "unhashable"
		return
	}
	sum := sha256.Sum256(body)
	o.hash = hex.EncodeToString(sum[:12])
	m := o.obj.(metav1.Object)
	a := maps.Clone(m.GetAnnotations())
	if a == nil {
		a = map[string]string{}
	}
	a[AnnoSpecHash] = o.hash
	m.SetAnnotations(a)
}

// Labels identify the platform's objects; the aggregator finds them by these.
func labels(w *api.Workload, sh api.Shard) map[string]string {
	l := map[string]string{}
	for k, v := range w.Metadata.Labels {
		l[k] = v
	}
	tier, _ := w.Spec.Scheduling()
	l[api.LabelManaged] = "true"
	l[api.LabelProject] = w.Metadata.Project
	l[api.LabelKind] = api.KindLabel(w.Kind)
	l[api.LabelWorkload] = w.Metadata.Name
	l[api.LabelTier] = string(tier)
	l[api.LabelShard] = sh.Cluster
	return l
}

func selector(w *api.Workload) map[string]string {
	return map[string]string{api.LabelKind: api.KindLabel(w.Kind), api.LabelWorkload: w.Metadata.Name}
}

func meta(w *api.Workload, sh api.Shard) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        w.Metadata.Name,
		Namespace:   api.Namespace(w.Metadata.Project),
		Labels:      labels(w, sh),
		Annotations: map[string]string{api.AnnoGeneration: strconv.FormatInt(w.Metadata.Generation, 10)},
	}
}

func podTemplate(w *api.Workload, sh api.Shard, restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	t := w.Spec.PodTemplate()
	_, pl := w.Spec.Scheduling()
	spec := corev1.PodSpec{
		RestartPolicy:      restart,
		HostNetwork:        t.HostNetwork,
		ServiceAccountName: t.ServiceAccount,
		NodeSelector:       pl.NodeSelector,
		// Simulated and real nodes alike: stop fast on delete.
		TerminationGracePeriodSeconds: ptr.To(int64(5)),
	}
	for _, c := range t.InitContainers {
		spec.InitContainers = append(spec.InitContainers, container(c))
	}
	// Managed sidecars are native sidecars: init containers that keep
	// running, so they start before and stop after the main containers.
	for _, c := range t.Sidecars {
		k := container(c)
		k.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		spec.InitContainers = append(spec.InitContainers, k)
	}
	for _, c := range t.Containers {
		spec.Containers = append(spec.Containers, container(c))
	}
	for _, v := range t.Volumes {
		vol := corev1.Volume{Name: v.Name}
		switch {
		case v.HostPath != "":
			vol.HostPath = &corev1.HostPathVolumeSource{Path: v.HostPath}
		case v.Config != nil || v.Secret != nil:
			vol.VolumeSource = configVolume(v) // config.go
		default:
			// The size the project's storage quota counts (api.Volume.SizeLimit).
			vol.EmptyDir = &corev1.EmptyDirVolumeSource{SizeLimit: sizeLimit(v.SizeLimit)}
		}
		spec.Volumes = append(spec.Volumes, vol)
	}
	for _, tol := range pl.Tolerations {
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
			Key: tol.Key, Operator: corev1.TolerationOperator(tol.Operator), Value: tol.Value, Effect: corev1.TaintEffect(tol.Effect),
		})
	}
	if h := pl.Hardware; h != nil && h.GPUType != "" {
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		spec.NodeSelector[api.NodeLabelGPU] = h.GPUType
	}
	if sh.PoolTier == api.PoolTierReserved {
		reservedPool(&spec)
	}
	podLabels := maps.Clone(t.Labels) // the user's first: the platform's win
	if podLabels == nil {
		podLabels = map[string]string{}
	}
	maps.Copy(podLabels, selector(w))
	podLabels[api.LabelManaged] = "true"
	podLabels[api.LabelProject] = w.Metadata.Project
	podLabels[api.LabelShard] = sh.Cluster
	return corev1.PodTemplateSpec{
		// No generation here: a scale must not restart the pods. The
		// restart annotations are what a restart operation changes: for a
		// Deployment a rolling restart (as kubectl rollout restart does), for
		// a Job a new Job. A restart of one container rolls the pods too
		// (Kubernetes cannot restart one container of a running pod); its
		// annotation names the container that asked.
		ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: configAnnotations(t, w.Control.RestartAnnotations())},
		Spec:       spec,
	}
}

func container(c api.Container) corev1.Container {
	k := corev1.Container{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args}
	for _, e := range c.Env {
		k.Env = append(k.Env, envVar(e)) // config.go
	}
	for _, ef := range c.EnvFrom {
		k.EnvFrom = append(k.EnvFrom, envFrom(ef))
	}
	for _, p := range c.Ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != "" {
			proto = corev1.Protocol(p.Protocol)
		}
		k.Ports = append(k.Ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: proto})
	}
	for _, m := range c.VolumeMounts {
		k.VolumeMounts = append(k.VolumeMounts, corev1.VolumeMount{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly})
	}
	if c.Privileged {
		k.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	}
	k.Resources = corev1.ResourceRequirements{Requests: resources(c.Resources.Requests), Limits: resources(c.Resources.Limits)}
	return k
}

func resources(r api.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	// Admission validated the quantities; one that still fails to parse is left out.
	if q, err := resource.ParseQuantity(r.CPU); err == nil && r.CPU != "" {
		out[corev1.ResourceCPU] = q
	}
	if q, err := resource.ParseQuantity(r.Memory); err == nil && r.Memory != "" {
		out[corev1.ResourceMemory] = q
	}
	if r.GPU > 0 {
		out[api.ResourceGPUName] = *resource.NewQuantity(r.GPU, resource.DecimalSI)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
