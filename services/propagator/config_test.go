package propagator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// configWorkload is an App whose first container reads a Config and a
// Secret every way a template can.
func configWorkload() *api.Workload {
	w := workload(api.KindApp, api.Control{})
	tmpl := w.Spec.PodTemplate()
	c := &tmpl.Containers[0]
	c.Env = []api.EnvVar{
		{Name: "PLAIN", Value: "v"},
		{Name: "LEVEL", ValueFrom: &api.EnvSource{ConfigRef: api.ConfigRef{Kind: api.KindConfig, Name: "conf"}, Key: "level"}},
		{Name: "PASS", ValueFrom: &api.EnvSource{ConfigRef: api.ConfigRef{Kind: api.KindSecret, Name: "creds", Optional: true}, Key: "password"}},
	}
	c.EnvFrom = []api.EnvFromSource{{ConfigRef: api.ConfigRef{Kind: api.KindConfig, Name: "conf"}, Prefix: "C_"}, {ConfigRef: api.ConfigRef{Kind: api.KindSecret, Name: "creds"}}}
	c.VolumeMounts = []api.VolumeMount{{Name: "conf", MountPath: "/etc/conf"}, {Name: "creds", MountPath: "/etc/creds"}}
	tmpl.Volumes = []api.Volume{
		{Name: "conf", Config: &api.ConfigVolume{Name: "conf", Items: []api.KeyPath{{Key: "app.yaml", Path: "app.yaml"}}, DefaultMode: ptr.To(int32(0o600))}},
		{Name: "creds", Secret: &api.ConfigVolume{Name: "creds"}},
	}
	tmpl.ConfigVersions = map[string]string{"Config/conf": "c1", "Secret/creds": "s1"}
	return w
}

func TestRenderConfigReferences(t *testing.T) {
	sh := api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 1}
	d := renderApp(configWorkload(), sh).obj.(*appsv1.Deployment)
	pt := d.Spec.Template
	c := pt.Spec.Containers[0]
	conf := corev1.LocalObjectReference{Name: "conf"}
	creds := corev1.LocalObjectReference{Name: "creds"}
	wantEnv := []corev1.EnvVar{
		{Name: "PLAIN", Value: "v"},
		{Name: "LEVEL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: conf, Key: "level"}}},
		{Name: "PASS", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: creds, Key: "password", Optional: ptr.To(true)}}},
	}
	if diff := cmp.Diff(wantEnv, c.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	wantFrom := []corev1.EnvFromSource{{Prefix: "C_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: conf}}, {SecretRef: &corev1.SecretEnvSource{LocalObjectReference: creds}}}
	if diff := cmp.Diff(wantFrom, c.EnvFrom); diff != "" {
		t.Errorf("envFrom (-want +got):\n%s", diff)
	}
	wantVols := []corev1.Volume{
		{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: conf, Items: []corev1.KeyToPath{{Key: "app.yaml", Path: "app.yaml"}}, DefaultMode: ptr.To(int32(0o600))}}},
		{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds", DefaultMode: ptr.To(int32(api.DefaultSecretMode))}}},
	}
	if diff := cmp.Diff(wantVols, pt.Spec.Volumes); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	wantAnno := map[string]string{"config.atoll.dev/conf": "c1", "secret.atoll.dev/creds": "s1"}
	if diff := cmp.Diff(wantAnno, pt.Annotations); diff != "" {
		t.Errorf("pod annotations (-want +got):\n%s", diff)
	}
}

// A new content version is a new pod template (the App rolls); without
// versions the template is what it was.
func TestConfigVersionChangesTheTemplate(t *testing.T) {
	sh := api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 1}
	w := configWorkload()
	before := renderApp(w, sh).obj.(*appsv1.Deployment).Spec.Template
	w.Spec.PodTemplate().ConfigVersions["Config/conf"] = "c2"
	after := renderApp(w, sh).obj.(*appsv1.Deployment).Spec.Template
	if cmp.Equal(before, after) {
		t.Error("a new Config version left the pod template as it was")
	}
	if got := after.Annotations["config.atoll.dev/conf"]; got != "c2" {
		t.Errorf("annotation %q, want c2", got)
	}
}
