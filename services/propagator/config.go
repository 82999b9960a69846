package propagator

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// A workload's references to Configs and Secrets (api.ConfigUse) are
// rendered as Kubernetes' own: a ConfigMap or Secret of the Config's or
// Secret's name in the project's namespace, which configsync.go writes
// into every member cluster that runs a workload naming it. An App's pods
// carry the content version of each Config and Secret they roll on
// (api.PodTemplate.ConfigVersions, set by admission) as an annotation, so
// a new version is a new pod template.

// envVar renders one variable: a value, or a key of a ConfigMap or Secret.
func envVar(e api.EnvVar) corev1.EnvVar {
	v := corev1.EnvVar{Name: e.Name, Value: e.Value}
	src := e.ValueFrom
	if src == nil {
		return v
	}
	opt := optional(src.Optional)
	ref := corev1.LocalObjectReference{Name: src.Name}
	switch src.Kind {
	case api.KindSecret:
		v.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref, Key: src.Key, Optional: opt}}
	default:
		v.ValueFrom = &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref, Key: src.Key, Optional: opt}}
	}
	return v
}

// envFrom renders a variable per key of a ConfigMap or Secret.
func envFrom(ef api.EnvFromSource) corev1.EnvFromSource {
	out := corev1.EnvFromSource{Prefix: ef.Prefix}
	ref := corev1.LocalObjectReference{Name: ef.Name}
	opt := optional(ef.Optional)
	switch ef.Kind {
	case api.KindSecret:
		out.SecretRef = &corev1.SecretEnvSource{LocalObjectReference: ref, Optional: opt}
	default:
		out.ConfigMapRef = &corev1.ConfigMapEnvSource{LocalObjectReference: ref, Optional: opt}
	}
	return out
}

// configVolume renders a Config's or a Secret's volume: every key as a
// file, or the items chosen, with the mode asked (the kind's default
// otherwise).
func configVolume(v api.Volume) corev1.VolumeSource {
	cv, mode := v.Config, int32(api.DefaultConfigMode)
	if v.Secret != nil {
		cv, mode = v.Secret, api.DefaultSecretMode
	}
	if cv.DefaultMode != nil {
		mode = *cv.DefaultMode
	}
	var items []corev1.KeyToPath
	for _, it := range cv.Items {
		items = append(items, corev1.KeyToPath{Key: it.Key, Path: it.Path})
	}
	opt := optional(cv.Optional)
	if v.Secret != nil {
		return corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: cv.Name, Items: items, DefaultMode: ptr.To(mode), Optional: opt}}
	}
	return corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: cv.Name}, Items: items, DefaultMode: ptr.To(mode), Optional: opt,
	}}
}

// optional is a reference's optional flag as Kubernetes takes it: set
// only when true, so a required reference renders as it always has.
func optional(o bool) *bool {
	if !o {
		return nil
	}
	return ptr.To(true)
}

// configAnnotations adds to a pod template's annotations (base, not
// changed) the content version of each Config and Secret it rolls on.
func configAnnotations(t *api.PodTemplate, base map[string]string) map[string]string {
	if len(t.ConfigVersions) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	for id, version := range t.ConfigVersions {
		if a := api.ConfigVersionAnnotation(id); a != "" {
			out[a] = version
		}
	}
	return out
}
