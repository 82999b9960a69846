package propagator

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// Pod Security Standards levels a tenant namespace is labelled with
// (https://kubernetes.io/docs/concepts/security/pod-security-standards/).
const (
	// PodSecurityRestricted is every project's level unless granted another.
	PodSecurityRestricted = "restricted"
	// PodSecurityBaseline is the level of a project a platform admin
	// granted it (Config.BaselineProjects): its pods may run as root.
	PodSecurityBaseline = "baseline"
)

// podSecurityModes are the Pod Security admission labels a tenant
// namespace carries, each set to the project's level.
var podSecurityModes = []string{
	"pod-security.kubernetes.io/enforce",
	"pod-security.kubernetes.io/audit",
	"pod-security.kubernetes.io/warn",
}

// podSpecOf returns the pod spec inside a rendered main object; nil for
// an object that has none (TestHardenEveryKind fails for a kind's object
// missing here).
func podSpecOf(obj any) *corev1.PodSpec {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &o.Spec
	case *appsv1.Deployment:
		return &o.Spec.Template.Spec
	case *appsv1.StatefulSet:
		return &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return &o.Spec.Template.Spec
	case *batchv1.Job:
		return &o.Spec.Template.Spec
	case *batchv1.CronJob:
		return &o.Spec.JobTemplate.Spec.Template.Spec
	}
	return nil
}

// harden makes a rendered pod spec fit the Pod Security level of its
// namespace (restricted, or baseline when granted), whatever the
// workload asked for and whatever got past admission: no host network,
// PID or IPC, no host path (such a volume becomes a scratch directory),
// no privileged container, the namespace's default ServiceAccount without
// its token, every container (init containers and the platform's sidecars
// included) without privilege escalation, with all capabilities dropped
// and the runtime's default seccomp profile, running as non-root unless
// the level is baseline, and every scratch directory with a size limit
// (api.DefaultScratchSize when the workload gives none).
func harden(spec *corev1.PodSpec, level string) {
	spec.HostNetwork, spec.HostPID, spec.HostIPC = false, false, false
	spec.ServiceAccountName, spec.DeprecatedServiceAccount = "", ""
	spec.AutomountServiceAccountToken = ptr.To(false)
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	psc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	if level != PodSecurityBaseline {
		psc.RunAsNonRoot = ptr.To(true)
	}
	spec.SecurityContext = psc
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.HostPath != nil {
			v.VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit == nil {
			v.EmptyDir.SizeLimit = ptr.To(resource.MustParse(api.DefaultScratchSize))
		}
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			hardenContainer(&cs[i], level)
		}
	}
	for i := range spec.EphemeralContainers {
		// Never rendered; should one appear, it gets the same.
		c := corev1.Container(spec.EphemeralContainers[i].EphemeralContainerCommon)
		hardenContainer(&c, level)
		spec.EphemeralContainers[i].EphemeralContainerCommon = corev1.EphemeralContainerCommon(c)
	}
}

// sizeLimit is a volume's size limit as rendered; nil (harden's default)
// when the workload gives none. Admission validated it.
func sizeLimit(v string) *resource.Quantity {
	q, err := resource.ParseQuantity(v)
	if v == "" || err != nil {
		return nil
	}
	return &q
}

// podSecurityLevel is the Pod Security level of project's namespace.
func (s *Service) podSecurityLevel(project string) string {
	if s.baseline[project] {
		return PodSecurityBaseline
	}
	return PodSecurityRestricted
}

func hardenContainer(c *corev1.Container, level string) {
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	sc.Privileged = nil
	sc.AllowPrivilegeEscalation = ptr.To(false)
	sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	sc.SeccompProfile = nil // the pod's RuntimeDefault
	sc.ProcMount, sc.SELinuxOptions, sc.WindowsOptions = nil, nil, nil
	if level != PodSecurityBaseline {
		sc.RunAsNonRoot = ptr.To(true)
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			sc.RunAsUser = nil
		}
	}
	c.SecurityContext = sc
	// Host ports are refused by both levels.
	c.Ports = slices.Clone(c.Ports)
	for i := range c.Ports {
		c.Ports[i].HostPort, c.Ports[i].HostIP = 0, ""
	}
}
