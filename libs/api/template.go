package api

import (
	"fmt"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// PodTemplate is what every pod of a workload runs.
type PodTemplate struct {
	// Containers are the main containers; at least one.
	Containers []Container `json:"containers"`
	// InitContainers run to completion, in order, before the containers.
	InitContainers []Container `json:"initContainers,omitempty"`
	// Sidecars are platform-managed containers that run beside the main
	// ones (native sidecars). Set by admission only.
	Sidecars []Container `json:"sidecars,omitempty"`
	// HostNetwork runs the pod in the node's network namespace (platform only).
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// Volumes the containers may mount.
	Volumes []Volume `json:"volumes,omitempty"`
	// ServiceAccount is not the tenant's to choose: pods run as their
	// namespace's "default" ServiceAccount, without its token. Only empty
	// or "default" (what older documents carry) is accepted.
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// Labels are put on every pod (the platform's own atoll.dev/ labels
	// are reserved); a change rolls the pods like any template change.
	Labels map[string]string `json:"labels,omitempty"`
	// TerminationGracePeriodSeconds is how long a pod has, after its
	// preStop hooks start and SIGTERM, before it is killed (probes.go):
	// at most the platform's maximum (Limits); DefaultTerminationGracePeriodSeconds
	// when unset.
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
	// ConfigVersions are the content versions of the Configs and Secrets
	// an App's template names with rolloutOnChange (configuse.go):
	// "Config/name" or "Secret/name" to the Config's ContentHash or the
	// Secret's Digest. Set by admission only (a document's is replaced),
	// so a change of content is a template change that rolls the App.
	ConfigVersions map[string]string `json:"configVersions,omitempty"`
	// VolumeClaimTemplates give every pod its own persistent claim, each
	// also a volume the containers mount by its name (claims.go); only
	// kinds with Kind.Claims accept them.
	VolumeClaimTemplates []VolumeClaimTemplate `json:"volumeClaimTemplates,omitempty"`
}

// Container is one container of a pod.
type Container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	Env     []EnvVar `json:"env,omitempty"`
	// EnvFrom sets a variable per key of a Config or a Secret.
	EnvFrom []EnvFromSource `json:"envFrom,omitempty"`
	Ports   []Port          `json:"ports,omitempty"`
	// Resources are the container's requests and limits.
	Resources Resources `json:"resources,omitzero"`
	// Privileged runs the container privileged (platform only).
	Privileged bool `json:"privileged,omitempty"`
	// VolumeMounts mount the pod's volumes.
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
	// WorkingDir is the container's working directory, an absolute path
	// (the image's when empty).
	WorkingDir string `json:"workingDir,omitempty"`
	// ReadinessProbe decides whether the container is ready: a pod
	// serves (its endpoints, an App's available count and the zone-by-zone
	// rollout's progress) only when all its containers are (probes.go).
	ReadinessProbe *Probe `json:"readinessProbe,omitempty"`
	// LivenessProbe restarts the container when it fails.
	LivenessProbe *Probe `json:"livenessProbe,omitempty"`
	// StartupProbe holds the other probes back until it succeeds once.
	StartupProbe *Probe `json:"startupProbe,omitempty"`
	// Lifecycle hooks run after the container starts and before it stops.
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// ValueFrom reads the value from a key of a Config or a Secret
	// instead (Value is then empty).
	ValueFrom *EnvSource `json:"valueFrom,omitempty"`
}

// Port is one container port.
type Port struct {
	// Name is an IANA service name (at most 15 characters, unique in the
	// pod); an App's named ports become its Service's ports.
	Name          string `json:"name,omitempty"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
	// AppProtocol is the port's application protocol (http, h2c, grpc,
	// or a domain-prefixed name), passed to the Service port.
	AppProtocol string `json:"appProtocol,omitempty"`
}

// Resources are a container's requests and limits.
type Resources struct {
	Requests ResourceList `json:"requests,omitzero"`
	Limits   ResourceList `json:"limits,omitzero"`
}

// ResourceList names quantities in Kubernetes notation ("500m", "2Gi").
type ResourceList struct {
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
	// GPU is a count of nvidia.com/gpu.
	GPU int64 `json:"nvidia.com/gpu,omitempty"`
}

// Volume is a pod volume.
type Volume struct {
	Name string `json:"name"`
	// EmptyDir is a scratch directory when true.
	EmptyDir bool `json:"emptyDir,omitempty"`
	// SizeLimit caps a scratch directory ("1Gi"; default
	// DefaultScratchSize, at most MaxEmptyDirSizeLimit). It counts towards
	// the project's storage quota once per pod.
	SizeLimit string `json:"sizeLimit,omitempty"`
	// HostPath mounts a node directory (platform only).
	HostPath string `json:"hostPath,omitempty"`
	// Config mounts a Config's keys as files.
	Config *ConfigVolume `json:"config,omitempty"`
	// Secret mounts a Secret's keys as files.
	Secret *ConfigVolume `json:"secret,omitempty"`
}

// DefaultScratchSize is a scratch (emptyDir) volume's size limit when
// none is given.
const DefaultScratchSize = "1Gi"

// Scratch reports whether v is a scratch directory: every volume but a
// host path, a Config or a Secret is rendered as an emptyDir.
func (v Volume) Scratch() bool { return v.HostPath == "" && v.Config == nil && v.Secret == nil }

// ScratchBytes is the total size limit of a pod's scratch volumes, what
// each pod counts towards the project's storage quota (unparsable sizes,
// caught by validation, count as zero).
func (t *PodTemplate) ScratchBytes() int64 {
	var n int64
	for _, v := range t.Volumes {
		if !v.Scratch() {
			continue
		}
		if q, err := resource.ParseQuantity(v.SizeLimit); err == nil {
			n += q.Value()
		}
	}
	return n
}

// VolumeMount mounts a volume into a container.
type VolumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

// Placement constrains where a workload may run.
type Placement struct {
	// Zones allowed (all when empty).
	Zones []string `json:"zones,omitempty"`
	// ClusterSelector must match the member cluster's labels.
	ClusterSelector map[string]string `json:"clusterSelector,omitempty"`
	// NodeSelector is passed to the pods.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations are passed to the pods and matched against cluster taints.
	Tolerations []Toleration `json:"tolerations,omitempty"`
	// Hardware asks for accelerators.
	Hardware *Hardware `json:"hardware,omitempty"`
}

// Toleration lets pods run on tainted nodes or clusters.
type Toleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"` // Equal (default) or Exists
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"` // NoSchedule, PreferNoSchedule, NoExecute, or all when empty
}

// Hardware asks for accelerators of a type.
type Hardware struct {
	// GPUType is the accelerator model (a100, h100, ...); any when empty.
	GPUType string `json:"gpuType,omitempty"`
	// GPUs per pod.
	GPUs int64 `json:"gpus,omitempty"`
}

// Quantities are a pod's total requests in base units.
type Quantities struct {
	MilliCPU    int64 `json:"milliCPU"`
	MemoryBytes int64 `json:"memoryBytes"`
	GPUs        int64 `json:"gpus"`
}

// PodRequests is a pod's effective request as the kube-scheduler counts
// it (k8s.io/component-helpers/resource): the containers and native
// sidecars together, or an init container with the sidecars started
// before it when that is larger. The pod is laid out as the propagator
// renders it: init containers first, then the sidecars.
func (t *PodTemplate) PodRequests() Quantities {
	var pod corev1.Pod
	always := corev1.ContainerRestartPolicyAlways
	for _, c := range t.InitContainers {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests.coreList()}})
	}
	for _, c := range t.Sidecars {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests.coreList()}})
	}
	for _, c := range t.Containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests.coreList()}})
	}
	return QuantitiesOf(resourcehelper.PodRequests(&pod, resourcehelper.PodResourcesOptions{}))
}

// QuantitiesOf reads CPU, memory and GPUs out of a Kubernetes resource list.
func QuantitiesOf(l corev1.ResourceList) Quantities {
	return Quantities{
		MilliCPU:    l.Cpu().MilliValue(),
		MemoryBytes: l.Memory().Value(),
		GPUs:        l.Name(corev1.ResourceName(ResourceGPUName), resource.DecimalSI).Value(),
	}
}

// coreList is r as a Kubernetes resource list; unparsable values (caught by
// validation) count as zero.
func (r ResourceList) coreList() corev1.ResourceList {
	l := corev1.ResourceList{}
	if v, err := resource.ParseQuantity(r.CPU); err == nil {
		l[corev1.ResourceCPU] = v
	}
	if v, err := resource.ParseQuantity(r.Memory); err == nil {
		l[corev1.ResourceMemory] = v
	}
	if r.GPU != 0 {
		l[corev1.ResourceName(ResourceGPUName)] = *resource.NewQuantity(r.GPU, resource.DecimalSI)
	}
	return l
}

// Defaults for container resources when none are requested.
const (
	DefaultCPU    = "100m"
	DefaultMemory = "128Mi"
)

func (t *PodTemplate) defaults() {
	t.claimDefaults() // claims.go
	for _, cs := range [][]Container{t.Containers, t.InitContainers} {
		for i := range cs {
			r := &cs[i].Resources
			if r.Requests.CPU == "" {
				r.Requests.CPU = firstNonEmpty(r.Limits.CPU, DefaultCPU)
			}
			if r.Requests.Memory == "" {
				r.Requests.Memory = firstNonEmpty(r.Limits.Memory, DefaultMemory)
			}
			if r.Requests.GPU == 0 {
				r.Requests.GPU = r.Limits.GPU
			}
			if r.Limits.GPU == 0 {
				r.Limits.GPU = r.Requests.GPU
			}
		}
	}
	for i := range t.Volumes {
		if v := &t.Volumes[i]; v.Scratch() && v.SizeLimit == "" {
			v.SizeLimit = DefaultScratchSize
		}
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// DefaultServiceAccount is the only ServiceAccount a pod runs as.
const DefaultServiceAccount = "default"

// MaxEmptyDirSizeLimit is the largest size limit a scratch (emptyDir)
// volume may ask for.
const MaxEmptyDirSizeLimit = "100Gi"

var maxEmptyDirSizeLimit = resource.MustParse(MaxEmptyDirSizeLimit)

// Upper bounds on what one container may ask for.
var (
	maxContainerCPU    = resource.MustParse("256")
	maxContainerMemory = resource.MustParse("4Ti")
)

const maxContainerGPUs = 16

var (
	dnsLabel   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	envName    = regexp.MustCompile(`^[-._a-zA-Z][-._a-zA-Z0-9]*$`)
	imageRef   = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._/:@-]*$`)
	labelKeyRe = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelValRe = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
)

// IsDNSLabel reports whether s is an RFC 1123 label of at most 63 characters.
func IsDNSLabel(s string) bool { return len(s) <= 63 && dnsLabel.MatchString(s) }

func (t *PodTemplate) validate(path string, fe *FieldErrors) {
	validatePodLabels(path+".labels", t.Labels, fe) // rollout.go
	if len(t.Containers) == 0 {
		fe.add(path+".containers", CodeRequired, "at least one container is required")
	}
	names := map[string]bool{}
	check := func(kind string, cs []Container) {
		for i := range cs {
			cs[i].validate(fmt.Sprintf("%s.%s[%d]", path, kind, i), names, fe)
		}
	}
	check("containers", t.Containers)
	check("initContainers", t.InitContainers)
	check("sidecars", t.Sidecars)
	t.validateServing(path, fe) // probes.go
	vols := map[string]bool{}
	for i, v := range t.Volumes {
		p := fmt.Sprintf("%s.volumes[%d]", path, i)
		if !IsDNSLabel(v.Name) {
			fe.add(p+".name", CodeInvalid, "%q is not a DNS label", v.Name)
		}
		if vols[v.Name] {
			fe.add(p+".name", CodeDuplicate, "volume %q is defined twice", v.Name)
		}
		vols[v.Name] = true
		if v.SizeLimit != "" {
			switch q, err := resource.ParseQuantity(v.SizeLimit); {
			case !v.Scratch():
				fe.add(p+".sizeLimit", CodeInvalid, "only a scratch (emptyDir) volume has a size limit")
			case err != nil || q.Sign() <= 0:
				fe.add(p+".sizeLimit", CodeInvalid, "%q is not a positive quantity", v.SizeLimit)
			case q.Cmp(maxEmptyDirSizeLimit) > 0:
				fe.add(p+".sizeLimit", CodeTooLarge, "%s exceeds the maximum of %s", v.SizeLimit, MaxEmptyDirSizeLimit)
			}
		}
		v.validateSource(p, fe) // configuse.go
	}
	t.validateClaims(path, vols, fe) // claims.go
	for _, cs := range [][]Container{t.Containers, t.InitContainers, t.Sidecars} {
		for _, c := range cs {
			for j, m := range c.VolumeMounts {
				if !vols[m.Name] {
					fe.add(fmt.Sprintf("%s.containers[%s].volumeMounts[%d].name", path, c.Name, j), CodeInvalid, "no volume named %q", m.Name)
				}
			}
		}
	}
	if t.ServiceAccount != "" && t.ServiceAccount != DefaultServiceAccount {
		fe.add(path+".serviceAccount", CodeInvalid, "%q: the platform chooses the pod's ServiceAccount; remove the field", t.ServiceAccount)
	}
}

// Validate returns the problems of c as a container at path p (its
// name, image, environment, ports, probes and resources): a managed
// sidecar's container is checked as a workload's is.
func (c *Container) Validate(p string) FieldErrors {
	var fe FieldErrors
	c.validate(p, map[string]bool{}, &fe)
	return fe
}

func (c *Container) validate(p string, names map[string]bool, fe *FieldErrors) {
	switch {
	case c.Name == "":
		fe.add(p+".name", CodeRequired, "container name is required")
	case !IsDNSLabel(c.Name):
		fe.add(p+".name", CodeInvalid, "%q is not a DNS label", c.Name)
	case names[c.Name]:
		fe.add(p+".name", CodeDuplicate, "container %q is defined twice", c.Name)
	}
	names[c.Name] = true
	switch {
	case c.Image == "":
		fe.add(p+".image", CodeRequired, "image is required")
	case len(c.Image) > 512 || !imageRef.MatchString(c.Image):
		fe.add(p+".image", CodeInvalid, "%q is not an image reference", c.Image)
	}
	for i, e := range c.Env {
		if !envName.MatchString(e.Name) {
			fe.add(fmt.Sprintf("%s.env[%d].name", p, i), CodeInvalid, "%q is not a valid environment variable name", e.Name)
		}
		e.validateSource(fmt.Sprintf("%s.env[%d]", p, i), fe) // configuse.go
	}
	for i, ef := range c.EnvFrom {
		ef.validate(fmt.Sprintf("%s.envFrom[%d]", p, i), fe)
	}
	c.validateServing(p, fe) // probes.go
	for i, port := range c.Ports {
		pp := fmt.Sprintf("%s.ports[%d]", p, i)
		if port.ContainerPort < 1 || port.ContainerPort > 65535 {
			fe.add(pp+".containerPort", CodeInvalid, "%d is not between 1 and 65535", port.ContainerPort)
		}
		if port.Protocol != "" && port.Protocol != "TCP" && port.Protocol != "UDP" && port.Protocol != "SCTP" {
			fe.add(pp+".protocol", CodeUnsupported, "%q: one of TCP, UDP, SCTP", port.Protocol)
		}
	}
	c.Resources.validate(p+".resources", fe)
}

func (r *Resources) validate(p string, fe *FieldErrors) {
	req := r.Requests.validate(p+".requests", fe)
	lim := r.Limits.validate(p+".limits", fe)
	if r.Limits.CPU != "" && req.cpu != nil && lim.cpu != nil && req.cpu.Cmp(*lim.cpu) > 0 {
		fe.add(p+".requests.cpu", CodeInvalid, "request %s exceeds limit %s", r.Requests.CPU, r.Limits.CPU)
	}
	if r.Limits.Memory != "" && req.mem != nil && lim.mem != nil && req.mem.Cmp(*lim.mem) > 0 {
		fe.add(p+".requests.memory", CodeInvalid, "request %s exceeds limit %s", r.Requests.Memory, r.Limits.Memory)
	}
	if r.Requests.GPU != 0 && r.Limits.GPU != 0 && r.Requests.GPU != r.Limits.GPU {
		fe.add(p+".limits.nvidia.com/gpu", CodeInvalid, "GPU request and limit must be equal")
	}
}

type parsed struct{ cpu, mem *resource.Quantity }

func (r ResourceList) validate(p string, fe *FieldErrors) parsed {
	out := parsed{cpu: quantity(fe, p+".cpu", r.CPU, maxContainerCPU), mem: quantity(fe, p+".memory", r.Memory, maxContainerMemory)}
	switch {
	case r.GPU < 0:
		fe.add(p+".nvidia.com/gpu", CodeInvalid, "%d is negative", r.GPU)
	case r.GPU > maxContainerGPUs:
		fe.add(p+".nvidia.com/gpu", CodeTooLarge, "%d exceeds the per-container maximum of %d", r.GPU, maxContainerGPUs)
	}
	return out
}

// quantity parses one amount ("" is unset) and checks it is within
// [0, most]; it returns nil when unset or invalid.
func quantity(fe *FieldErrors, field, v string, most resource.Quantity) *resource.Quantity {
	if v == "" {
		return nil
	}
	q, err := resource.ParseQuantity(v)
	switch {
	case err != nil:
		fe.add(field, CodeInvalid, "%q is not a quantity", v)
	case q.Sign() < 0:
		fe.add(field, CodeInvalid, "%s is negative", v)
	case q.Cmp(most) > 0:
		fe.add(field, CodeTooLarge, "%s exceeds the per-container maximum of %s", v, most.String())
	default:
		return &q
	}
	return nil
}

func (pl *Placement) validate(p string, fe *FieldErrors) {
	if pl == nil {
		return
	}
	for i, z := range pl.Zones {
		if !IsDNSLabel(z) {
			fe.add(fmt.Sprintf("%s.zones[%d]", p, i), CodeInvalid, "%q is not a zone name", z)
		}
	}
	validateLabels(p+".clusterSelector", pl.ClusterSelector, fe)
	validateLabels(p+".nodeSelector", pl.NodeSelector, fe)
	for i, t := range pl.Tolerations {
		tp := fmt.Sprintf("%s.tolerations[%d]", p, i)
		if t.Operator != "" && t.Operator != "Equal" && t.Operator != "Exists" {
			fe.add(tp+".operator", CodeUnsupported, "%q: one of Equal, Exists", t.Operator)
		}
		if t.Operator == "Exists" && t.Value != "" {
			fe.add(tp+".value", CodeInvalid, "must be empty with operator Exists")
		}
		switch t.Effect {
		case "", "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			fe.add(tp+".effect", CodeUnsupported, "%q: one of NoSchedule, PreferNoSchedule, NoExecute", t.Effect)
		}
	}
	if h := pl.Hardware; h != nil {
		if h.GPUs < 0 || h.GPUs > maxContainerGPUs {
			fe.add(p+".hardware.gpus", CodeInvalid, "%d is not between 0 and %d", h.GPUs, maxContainerGPUs)
		}
		if h.GPUType != "" && !IsDNSLabel(h.GPUType) {
			fe.add(p+".hardware.gpuType", CodeInvalid, "%q is not a GPU type name", h.GPUType)
		}
	}
}

func validateLabels(p string, m map[string]string, fe *FieldErrors) {
	for k, v := range m {
		if len(k) > 253 || !labelKeyRe.MatchString(k) {
			fe.add(p, CodeInvalid, "%q is not a label key", k)
		}
		if len(v) > 63 || !labelValRe.MatchString(v) {
			fe.add(p+"."+k, CodeInvalid, "%q is not a label value", v)
		}
	}
}

func validateTier(p string, t Tier, fe *FieldErrors) {
	switch t {
	case TierReserved, TierOnDemand, TierPreemptible:
	default:
		fe.add(p, CodeUnsupported, "%q: one of Reserved, OnDemand, Preemptible", t)
	}
}
