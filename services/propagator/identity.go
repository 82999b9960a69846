package propagator

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
)

// identity is where a shard's pods run and what they are.
type identity struct {
	region, zone, cluster, project, kind, workload string
}

func identityOf(region string, w *api.Workload, sh api.Shard) identity {
	return identity{region: region, zone: sh.Zone, cluster: sh.Cluster, project: w.Metadata.Project, kind: w.Kind, workload: w.Metadata.Name}
}

// env is the identity as the variables of api.IdentityEnv, in its order:
// the platform's own first, then the downward API's.
func (id identity) env() []corev1.EnvVar {
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
	}
	return []corev1.EnvVar{
		{Name: api.EnvRegion, Value: id.region},
		{Name: api.EnvZone, Value: id.zone},
		{Name: api.EnvCluster, Value: id.cluster},
		{Name: api.EnvProject, Value: id.project},
		{Name: api.EnvKind, Value: id.kind},
		{Name: api.EnvWorkload, Value: id.workload},
		{Name: api.EnvPodName, ValueFrom: field("metadata.name")},
		{Name: api.EnvPodNamespace, ValueFrom: field("metadata.namespace")},
		{Name: api.EnvPodIP, ValueFrom: field("status.podIP")},
		{Name: api.EnvNodeName, ValueFrom: field("spec.nodeName")},
	}
}

// identify puts the identity into every container's environment, before
// the container's own variables (so that they may refer to it as
// $(ATOLL_ZONE)), and into the pod's labels. Variables of the same names
// that the kind set are replaced; a user's are refused by validation.
func identify(m *metav1.ObjectMeta, spec *corev1.PodSpec, id identity) {
	env := id.env()
	for _, ks := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range ks {
			own := slices.DeleteFunc(ks[i].Env, func(e corev1.EnvVar) bool { return api.IsIdentityEnv(e.Name) })
			ks[i].Env = append(slices.Clip(env), own...)
		}
	}
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[api.LabelProject] = id.project
	m.Labels[api.LabelKind] = api.KindLabel(id.kind)
	m.Labels[api.LabelWorkload] = id.workload
	m.Labels[api.LabelZone] = id.zone
}
