package disruption_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"atoll.dev/libs/disruption"
)

// TestKWOKReplace: the replacement is a new node of the same pool (new
// name, the pool's labels, KWOK's annotation, no node-lifecycle taints)
// and the old node goes; a repeated call creates nothing more.
func TestKWOKReplace(t *testing.T) {
	old := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "zone-a-general-3", UID: "u-3",
			Labels:      map[string]string{disruption.LabelPool: "general", "topology.kubernetes.io/zone": "a", "kubernetes.io/hostname": "zone-a-general-3"},
			Annotations: map[string]string{"atoll.dev/cordoned-by": "remediation"}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{
			{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule},
			{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		}},
	}
	cs := fake.NewClientset(old)
	p := &disruption.KWOK{Client: cs}
	name := disruption.ReplacementName(old, 1)
	require.NotEqual(t, name, disruption.ReplacementName(old, 2), "each attempt its own name")
	require.Equal(t, name, disruption.ReplacementName(old, 1), "an attempt's name is stable")
	ctx := context.Background()
	for range 2 {
		require.NoError(t, p.Replace(ctx, old, disruption.Replacement{Name: name, Labels: map[string]string{"atoll.dev/version": "v2"}}))
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	n := list.Items[0]
	require.Equal(t, name, n.Name)
	require.Equal(t, "general", n.Labels[disruption.LabelPool])
	require.Equal(t, "v2", n.Labels["atoll.dev/version"])
	require.Equal(t, name, n.Labels["kubernetes.io/hostname"])
	require.Equal(t, old.Name, n.Labels[disruption.LabelReplaces])
	require.Equal(t, "fake", n.Annotations[disruption.AnnoKWOKNode])
	require.False(t, n.Spec.Unschedulable)
	require.Equal(t, []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}, n.Spec.Taints)
}
