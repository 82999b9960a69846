package aggregator

import (
	"slices"
	"strconv"
	"strings"
	"unique"

	"atoll.dev/libs/api"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// podView is what the aggregator keeps of a member cluster's pod: the
// fields it reads, with what is shared between pods (namespaces, nodes,
// label sets, images) held once. The pod informer's transform (slimPod)
// stores a podView in place of the *corev1.Pod, so the cache grows by a
// few hundred bytes per pod instead of the API object's several KiB
// (managedFields, env, probes, volumes, tolerations), and the informer
// holds every pod of the cluster, the platform's and everyone else's.
type podView struct {
	Name      string
	UID       types.UID
	Namespace istr
	// Key is the workload key of a platform pod, "" for any other.
	Key istr
	// Labels are the pod's labels, canonical (labelSet), without those
	// unique to one pod that nothing here reads.
	Labels   istr
	Node     istr
	Phase    istr
	IP       string
	Deleting bool
	// Ready is the PodReady condition's status.
	Ready bool
	// Index is a Job pod's completion index, -1 when it has none.
	Index int32
	// Attempt is a TrainingJob pod's gang attempt.
	Attempt int32
	// Configs are the versions of the Configs and Secrets the pod runs,
	// from its annotations (configuse.go configVersions).
	Configs istr
	// Template is the api.AnnoTemplate annotation (the template revision
	// an in-place updated App's pod runs), "" when it has none.
	Template istr
	// Restarts sums the main containers' restart counts.
	Restarts int32
	// Requests is the pod's effective request as the kube-scheduler
	// counts it (native sidecars, init containers and overhead included).
	Requests api.Quantities
	// Unscheduled is the PodScheduled=False condition, nil when none.
	Unscheduled *podCondition
	// Containers are the init containers (native sidecars among them),
	// then the main containers, in the pod's order.
	Containers []containerView
}

// podCondition is a pod condition's reason and message.
type podCondition struct{ Reason, Message string }

// containerView is what the aggregator reads of one container: its spec's
// name, image and requests, and its status.
type containerView struct {
	Name istr
	// Image is the spec's; StatusImage what the kubelet reports running.
	Image, StatusImage istr
	// State names the state with its reason ("Waiting (CrashLoopBackOff)").
	State       istr
	Type        containerType
	HasStatus   bool
	Ready       bool
	Restarts    int32
	MilliCPU    int64
	MemoryBytes int64
}

// containerType tells main containers from init containers and native
// sidecars (init containers that keep running).
type containerType uint8

const (
	mainContainer containerType = iota
	initContainer
	sidecarContainer
)

// String is the type's name in the API (api.ContainerMain, ...).
func (c containerType) String() string {
	switch c {
	case initContainer:
		return api.ContainerInit
	case sidecarContainer:
		return api.ContainerSidecar
	}
	return api.ContainerMain
}

// istr is an interned string: equal values share one copy, held while any
// pod refers to it (package unique).
type istr struct{ h unique.Handle[string] }

func intern(s string) istr { return istr{unique.Make(s)} }

// String returns the value; "" for the zero istr.
func (s istr) String() string {
	if s == (istr{}) {
		return ""
	}
	return s.h.Value()
}

// perPodLabels are labels the controllers set to a different value on
// every pod, which nothing here reads: kept, they would make every pod's
// label set its own.
var perPodLabels = map[string]bool{
	appsv1.StatefulSetPodNameLabel:       true,
	appsv1.PodIndexLabel:                 true,
	batchv1.JobCompletionIndexAnnotation: true, // also a label, with the same key
}

// labelSet returns the labels canonically: sorted "key=value" lines.
func labelSet(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		if !perPodLabels[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l[k])
		b.WriteByte('\n')
	}
	return b.String()
}

// label returns the value of one of the pod's labels.
func (p *podView) label(key string) (string, bool) {
	for line := range strings.Lines(p.Labels.String()) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		if k == key {
			return v, true
		}
	}
	return "", false
}

// labels returns the pod's labels as a map (a new one: a view is shared).
func (p *podView) labels() map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(p.Labels.String()) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		out[k] = v
	}
	return out
}

// GetObjectMeta makes a view a metav1.ObjectMetaAccessor, which is what
// the informer's store and indexers key it by (meta.Accessor).
func (p *podView) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace.String(), UID: p.UID, Labels: p.labels()}
}

// running says the pod runs and is not going away.
func (p *podView) running() bool {
	return !p.Deleting && p.phase() == corev1.PodRunning
}

func (p *podView) phase() corev1.PodPhase { return corev1.PodPhase(p.Phase.String()) }

// mains returns the main containers.
func (p *podView) mains() []containerView {
	i := slices.IndexFunc(p.Containers, func(c containerView) bool { return c.Type == mainContainer })
	if i < 0 {
		return nil
	}
	return p.Containers[i:]
}

// slimPod is the pod informer's transform: a *corev1.Pod becomes its
// podView; anything else (a view already, a tombstone) passes unchanged.
func slimPod(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		return viewOf(p), nil
	}
	return obj, nil
}

// viewOf returns what the aggregator keeps of the pod.
func viewOf(p *corev1.Pod) *podView {
	v := &podView{
		Name: p.Name, UID: p.UID, Namespace: intern(p.Namespace),
		Labels: intern(labelSet(p.Labels)), Node: intern(p.Spec.NodeName), Phase: intern(string(p.Status.Phase)),
		IP: p.Status.PodIP, Deleting: p.DeletionTimestamp != nil, Index: -1,
		Requests: podRequests(p),
	}
	if key, ok := workloadKey(p.Labels); ok {
		v.Key = intern(key)
	}
	if s, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]; ok {
		if i, err := strconv.ParseInt(s, 10, 32); err == nil {
			v.Index = int32(i)
		}
	}
	v.Attempt = attemptOf(p.Annotations)
	v.Configs = intern(configVersions(p.Annotations))
	v.Template = intern(p.Annotations[api.AnnoTemplate])
	for _, s := range p.Status.ContainerStatuses {
		v.Restarts += s.RestartCount
	}
	for _, c := range p.Status.Conditions {
		switch {
		case c.Type == corev1.PodReady:
			v.Ready = c.Status == corev1.ConditionTrue
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse:
			v.Unscheduled = &podCondition{Reason: c.Reason, Message: c.Message}
		}
	}
	v.Containers = make([]containerView, 0, len(p.Spec.InitContainers)+len(p.Spec.Containers))
	add := func(c *corev1.Container, typ containerType, statuses []corev1.ContainerStatus) {
		cv := containerView{
			Name: intern(c.Name), Image: intern(c.Image), Type: typ,
			MilliCPU: c.Resources.Requests.Cpu().MilliValue(), MemoryBytes: c.Resources.Requests.Memory().Value(),
		}
		if i := slices.IndexFunc(statuses, func(s corev1.ContainerStatus) bool { return s.Name == c.Name }); i >= 0 {
			s := &statuses[i]
			cv.HasStatus, cv.Ready, cv.Restarts = true, s.Ready, s.RestartCount
			cv.StatusImage, cv.State = intern(s.Image), intern(containerState(s.State))
		}
		v.Containers = append(v.Containers, cv)
	}
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		typ := initContainer
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			typ = sidecarContainer
		}
		add(c, typ, p.Status.InitContainerStatuses)
	}
	for i := range p.Spec.Containers {
		add(&p.Spec.Containers[i], mainContainer, p.Status.ContainerStatuses)
	}
	return v
}

// podsOf returns the views among a cache's objects.
func podsOf(objs []any) []*podView {
	out := make([]*podView, 0, len(objs))
	for _, o := range objs {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if p, ok := o.(*podView); ok {
			out = append(out, p)
		}
	}
	return out
}
