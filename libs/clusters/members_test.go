package clusters_test

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"atoll.dev/libs/clusters"
)

func TestMembersRoundTripThroughYAML(t *testing.T) {
	in := clusters.Members{{Name: "zone-a", Zone: "a", Kubeconfig: "/tmp/a: b/kubeconfig"}, {Name: "zone-b", Zone: "b", Labels: map[string]string{"gpu": "a100"}, Kubeconfig: "/k"}}
	b, err := yaml.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := clusters.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].Kubeconfig != in[0].Kubeconfig || out[1].Labels["gpu"] != "a100" {
		t.Fatalf("round trip: %+v", out)
	}
}
