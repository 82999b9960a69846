package propagator

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/envelope"
)

// A Secret is opened with the keyring, bound to its project and name,
// and written as a Kubernetes Secret of its values, labelled as Atoll's
// and carrying its digest; one that does not open (another name, no
// keyring) is an error that never holds a value. A Config is a ConfigMap
// of its data and files.
func TestRenderConfigDoc(t *testing.T) {
	dir := t.TempDir()
	if err := envelope.GenerateKEK(dir, "k1"); err != nil {
		t.Fatal(err)
	}
	sealer, err := envelope.LoadSealer(filepath.Join(dir, envelope.PublicFile("k1")))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := envelope.LoadKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	const value = "hunter2-value"
	plain, _ := json.Marshal(map[string]string{"password": value})
	sealed, err := sealer.Seal(plain, []byte("p/creds"))
	if err != nil {
		t.Fatal(err)
	}
	secretDoc, _ := json.Marshal(map[string]any{"kind": "Secret", "spec": api.SecretSpec{Keys: []string{"password"}, Digest: "d1", Sealed: &sealed}})

	o, err := renderConfigDoc(ring, "p", api.ConfigRef{Kind: api.KindSecret, Name: "creds"}, secretDoc)
	if err != nil {
		t.Fatal(err)
	}
	sec := o.obj.(*corev1.Secret)
	if diff := cmp.Diff(map[string][]byte{"password": []byte(value)}, sec.Data); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
	wantLabels := map[string]string{api.LabelManaged: "true", api.LabelProject: "p", api.LabelConfigRef: "secret"}
	if diff := cmp.Diff(wantLabels, sec.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if o.gvr != secrets || o.version != "d1" || sec.Annotations[AnnoConfigVersion] != "d1" || sec.Namespace != "atoll-p" {
		t.Errorf("rendered %v version %q annotations %v namespace %q", o.gvr, o.version, sec.Annotations, sec.Namespace)
	}

	for _, tc := range []struct {
		name    string
		keyring SecretOpener
		secret  string
	}{{"another name", ring, "stolen"}, {"no keyring", nil, "creds"}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderConfigDoc(tc.keyring, "p", api.ConfigRef{Kind: api.KindSecret, Name: tc.secret}, secretDoc)
			if err == nil {
				t.Fatal("opened")
			}
			if strings.Contains(err.Error(), value) {
				t.Errorf("the error holds the value: %v", err)
			}
			if tc.keyring == nil && !errors.Is(err, errNoKeyring) {
				t.Errorf("err %v, want errNoKeyring", err)
			}
		})
	}

	configDoc := []byte(`{"kind":"Config","spec":{"data":{"LEVEL":"info"},"files":{"app.conf":"x=1\n"}}}`)
	o, err = renderConfigDoc(nil, "p", api.ConfigRef{Kind: api.KindConfig, Name: "conf"}, configDoc)
	if err != nil {
		t.Fatal(err)
	}
	cm := o.obj.(*corev1.ConfigMap)
	if diff := cmp.Diff(map[string]string{"LEVEL": "info", "app.conf": "x=1\n"}, cm.Data); diff != "" {
		t.Errorf("ConfigMap data (-want +got):\n%s", diff)
	}
	if want := (&api.ConfigSpec{Data: map[string]string{"LEVEL": "info"}, Files: map[string]string{"app.conf": "x=1\n"}}).ContentHash(); o.version != want {
		t.Errorf("version %q, want the content hash %q", o.version, want)
	}
}
