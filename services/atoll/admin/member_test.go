package admin

import (
	"path/filepath"
	"slices"
	"testing"

	"atoll.dev/libs/clusters"
)

// TestUpsertMember: a join adds its cluster to the service's clusters
// file, and a second join of the same cluster replaces its entry.
func TestUpsertMember(t *testing.T) {
	p := filepath.Join(t.TempDir(), "clusters.yaml")
	steps := []struct {
		add  clusters.Member
		want []string // kubeconfig per entry, in order
	}{
		{clusters.Member{Name: "zone-a", Zone: "a", Kubeconfig: "/etc/atoll/clusters/zone-a.kubeconfig"}, []string{"/etc/atoll/clusters/zone-a.kubeconfig"}},
		{clusters.Member{Name: "zone-b", Zone: "b", Kubeconfig: "/etc/atoll/clusters/zone-b.kubeconfig", QPS: 20}, []string{"/etc/atoll/clusters/zone-a.kubeconfig", "/etc/atoll/clusters/zone-b.kubeconfig"}},
		{clusters.Member{Name: "zone-a", Zone: "a", Kubeconfig: "/m/zone-a.kubeconfig"}, []string{"/m/zone-a.kubeconfig", "/etc/atoll/clusters/zone-b.kubeconfig"}},
	}
	for i, s := range steps {
		if err := upsertMember(p, s.add); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		ms, err := clusters.Load(p)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		var got []string
		for _, m := range ms {
			got = append(got, m.Kubeconfig)
		}
		if !slices.Equal(got, s.want) {
			t.Errorf("step %d: kubeconfigs %v, want %v", i, got, s.want)
		}
	}
}
