package aggregator

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
)

// TestAppPodsByTemplate: an App's pods are counted by the revision they
// say they run, per cluster and summed per zone; terminating pods and
// pods that say nothing are not.
func TestAppPodsByTemplate(t *testing.T) {
	pod := func(rev string, going bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if rev != "" {
			p.Annotations[api.AnnoTemplate] = rev
		}
		if going {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		return p
	}
	if diff := cmp.Diff(map[string]int32{"v1": 1, "v2": 2},
		templatesOf(views([]*corev1.Pod{pod("v1", false), pod("v2", false), pod("v2", false), pod("v1", true), pod("", false)}))); diff != "" {
		t.Errorf("templatesOf (-want +got):\n%s", diff)
	}
	if got := templatesOf(views([]*corev1.Pod{pod("", false)})); got != nil {
		t.Errorf("templatesOf of pods that say nothing = %v, want nil", got)
	}

	a1, a2, b := rolled("a1", 2), rolled("a2", 1), rolled("b", 2)
	a1.zone, a2.zone = "a", "a"
	a1.obs.Part.(*appPart).Templates = map[string]int32{"v1": 1, "v2": 1}
	a2.obs.Part.(*appPart).Templates = map[string]int32{"v2": 1}
	b.obs.Part.(*appPart).Templates = map[string]int32{"v1": 2}
	st := api.Status{Zones: map[string]api.ZoneStatus{}, Clusters: map[string]api.ZoneStatus{}}
	foldApp(app(5, false), []shardView{a1, a2, b}, &st)
	want := map[string]map[string]int32{"a": {"v1": 1, "v2": 2}, "b": {"v1": 2}}
	got := map[string]map[string]int32{}
	for z, zs := range st.Zones {
		got[z] = zs.Templates
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("zones' templates (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int32{"v1": 1, "v2": 1}, st.Clusters["a1"].Templates); diff != "" {
		t.Errorf("cluster a1's templates (-want +got):\n%s", diff)
	}
}
