package aggregator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
)

// configPod is a pod in phase running with the version annotations of
// versions ("Config/name" to version).
func configPod(phase corev1.PodPhase, versions map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"other": "x"}}, Status: corev1.PodStatus{Phase: phase}}
	for id, v := range versions {
		p.Annotations[api.ConfigVersionAnnotation(id)] = v
	}
	return p
}

// The versions an App runs per zone: read from its running pods'
// annotations in each cluster, merged per zone and sorted; pending pods
// and other annotations do not count.
func TestConfigVersionsPerZone(t *testing.T) {
	shard := func(cluster, zone string, pods ...*corev1.Pod) shardView {
		return shardView{cluster: cluster, zone: zone, obs: *observe(views(pods))}
	}
	shards := []shardView{
		shard("a1", "a", configPod(corev1.PodRunning, map[string]string{"Config/web-conf": "v2", "Secret/web-db": "d1"})),
		// Zone b mid-rollout over two clusters; a pending pod's v3 is not run yet.
		shard("b1", "b", configPod(corev1.PodRunning, map[string]string{"Config/web-conf": "v2"}),
			configPod(corev1.PodPending, map[string]string{"Config/web-conf": "v3"})),
		shard("b2", "b", configPod(corev1.PodRunning, map[string]string{"Config/web-conf": "v1"}),
			configPod(corev1.PodRunning, map[string]string{"Config/web-conf": "v2"})),
		shard("c1", "c", configPod(corev1.PodPending, map[string]string{"Config/web-conf": "v2"})),
	}
	st := api.Status{Zones: map[string]api.ZoneStatus{"a": {}, "b": {}, "c": {}}}
	foldConfigVersions(shards, &st)
	got := map[string]map[string][]string{}
	for z, s := range st.Zones {
		got[z] = s.ConfigVersions
	}
	want := map[string]map[string][]string{
		"a": {"Config/web-conf": {"v2"}, "Secret/web-db": {"d1"}},
		"b": {"Config/web-conf": {"v1", "v2"}},
		"c": nil,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("versions per zone (-want +got):\n%s", diff)
	}
}
