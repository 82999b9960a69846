package deploytest

import "testing"

// TestManifestsKEKOnlyWhereNeeded: the private key-encryption keys are
// mounted into the propagator alone, the public key into admission alone;
// no other Deployment (the gateway above all) holds either.
func TestManifestsKEKOnlyWhereNeeded(t *testing.T) {
	x := indexOf(t, objects(t, build(t)))
	if s := x.secrets["atoll-kek-private"]; s == nil || s.Data["kek-k1.key"] == nil {
		t.Fatal("no Secret atoll-kek-private holding kek-k1.key")
	}
	for name, d := range x.deployments {
		var private, public bool
		for _, v := range d.Spec.Template.Spec.Volumes {
			private = private || v.Secret != nil && hashSuffix.ReplaceAllString(v.Secret.SecretName, "") == "atoll-kek-private"
			public = public || v.ConfigMap != nil && hashSuffix.ReplaceAllString(v.ConfigMap.Name, "") == "atoll-kek-public"
		}
		env := map[string]string{}
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if got, want := private, name == "atoll-propagator"; got != want {
			t.Errorf("%s mounts the private KEKs: %v, want %v", name, got, want)
		}
		if got, want := public, name == "atoll-admission"; got != want {
			t.Errorf("%s mounts the public KEK: %v, want %v", name, got, want)
		}
		if name == "atoll-propagator" && env["ATOLL_PROPAGATOR_KEK_DIR"] == "" {
			t.Errorf("%s: no ATOLL_PROPAGATOR_KEK_DIR", name)
		}
		if name == "atoll-admission" && env["ATOLL_ADMISSION_KEK_PUBLIC"] == "" {
			t.Errorf("%s: no ATOLL_ADMISSION_KEK_PUBLIC", name)
		}
	}
	if x.deployments["atoll-gateway"] == nil {
		t.Error("no gateway Deployment to check")
	}
}
