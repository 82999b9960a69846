package propagator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"atoll.dev/libs/api"
)

func TestReservedPool(t *testing.T) {
	own := map[string]string{"disk": "ssd"}
	spec := corev1.PodSpec{NodeSelector: own}
	reservedPool(&spec)
	if diff := cmp.Diff(map[string]string{"disk": "ssd", api.NodeLabelTier: api.PoolTierReserved}, spec.NodeSelector); diff != "" {
		t.Errorf("node selector (-want +got):\n%s", diff)
	}
	if len(own) != 1 {
		t.Errorf("the workload's node selector was changed: %v", own)
	}
	want := []corev1.Toleration{{Key: api.NodeLabelTier, Operator: corev1.TolerationOpEqual, Value: api.PoolTierReserved, Effect: corev1.TaintEffectNoSchedule}}
	if diff := cmp.Diff(want, spec.Tolerations); diff != "" {
		t.Errorf("tolerations (-want +got):\n%s", diff)
	}
}
