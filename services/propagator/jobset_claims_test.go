package propagator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// A JobSet's claim templates render as generic ephemeral volumes of the
// Job's pod template: the member cluster makes each index's pod its own
// claim, labelled like the Job, with the template's size, class and modes.
func TestRenderJobSetClaims(t *testing.T) {
	w := workload(api.KindJobSet, api.Control{})
	w.Spec.PodTemplate().VolumeClaimTemplates = []api.VolumeClaimTemplate{
		{Name: "data", Storage: "10Gi", StorageClass: "fast"},
		{Name: "logs", Storage: "1Gi", AccessModes: []string{"ReadWriteOncePod"}},
	}
	sh := api.Shard{Cluster: "zone-a", Replicas: 2, IndexStart: 0, IndexEnd: 10}
	j := renderJobSet(w, sh).obj.(*batchv1.Job)
	type claim struct {
		Name, Storage string
		Class         *string
		Modes         []corev1.PersistentVolumeAccessMode
		Workload      string
	}
	var got []claim
	for _, v := range j.Spec.Template.Spec.Volumes {
		e := v.Ephemeral
		if e == nil {
			continue
		}
		q := e.VolumeClaimTemplate.Spec.Resources.Requests[corev1.ResourceStorage]
		got = append(got, claim{v.Name, q.String(), e.VolumeClaimTemplate.Spec.StorageClassName,
			e.VolumeClaimTemplate.Spec.AccessModes, e.VolumeClaimTemplate.Labels[api.LabelWorkload]})
	}
	want := []claim{
		{"data", "10Gi", ptr.To("fast"), []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, "w"},
		{"logs", "1Gi", nil, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}, "w"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	// Hardening leaves them be: the restricted level allows ephemeral volumes.
	spec := podSpecOf(j)
	harden(spec, PodSecurityRestricted)
	n := 0
	for _, v := range spec.Volumes {
		if v.Ephemeral != nil {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d ephemeral volumes after hardening, want 2", n)
	}
}
