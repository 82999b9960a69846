package propagator

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"atoll.dev/libs/api"
)

// A scratch volume is rendered with the size limit the project's storage
// quota counts (api.DefaultScratchSize when none is given).
func TestRenderScratchSizeLimit(t *testing.T) {
	w := workload(api.KindApp, api.Control{})
	tmpl := w.Spec.PodTemplate()
	tmpl.Volumes = []api.Volume{{Name: "given", EmptyDir: true, SizeLimit: "2Gi"}, {Name: "defaulted", EmptyDir: true}}
	w.Spec.Default()
	d, ok := newKinds()[api.KindApp].render(&desired{workload: w}, api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 1}).obj.(*appsv1.Deployment)
	if !ok {
		t.Fatal("an App renders no Deployment")
	}
	want := map[string]string{"given": "2Gi", "defaulted": api.DefaultScratchSize}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Cmp(resource.MustParse(want[v.Name])) != 0 {
			t.Errorf("volume %s: %+v, want an emptyDir of %s", v.Name, v.VolumeSource, want[v.Name])
		}
	}
	if len(d.Spec.Template.Spec.Volumes) != len(want) {
		t.Errorf("%d volumes, want %d", len(d.Spec.Template.Spec.Volumes), len(want))
	}
}
