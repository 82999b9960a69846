package disruption_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"atoll.dev/libs/disruption"
	"atoll.dev/libs/testenv"
)

// TestKWOKReplace replaces a cordoned node of a real member cluster: the
// replacement is a new node of the same pool and zone (new name, the new
// version label, KWOK's annotation, no node-lifecycle taints, not
// cordoned) that KWOK makes Ready, and the old node is deleted; a repeated
// call creates nothing more.
func TestKWOKReplace(t *testing.T) {
	c := member(t)
	cs := c.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	gpu := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	pool := unique("replace")
	nodes, err := c.AddNodes(ctx, testenv.NodePool{Name: pool, Count: 1, Taints: []corev1.Taint{gpu}})
	require.NoError(t, err)

	// Cordon it as remediation does, the node lifecycle controller then
	// adding its node.kubernetes.io/unschedulable taint, and mark it out
	// of service (a node-lifecycle taint no controller takes off the
	// replacement, so only Replace's filter keeps it away).
	_, err = cs.CoreV1().Nodes().Patch(ctx, nodes[0], types.MergePatchType, []byte(`{
		"metadata":{"annotations":{"atoll.dev/cordoned-by":"remediation"}},
		"spec":{"unschedulable":true,"taints":[
			{"key":"dedicated","value":"gpu","effect":"NoSchedule"},
			{"key":"node.kubernetes.io/out-of-service","value":"nodeshutdown","effect":"NoExecute"}]}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	var old *corev1.Node
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
		if !assert.NoError(ct, err) {
			return
		}
		assert.True(ct, slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnschedulable }),
			"taints %v", n.Spec.Taints)
		old = n
	}, time.Minute, 200*time.Millisecond)

	p := &disruption.KWOK{Client: cs}
	name := disruption.ReplacementName(old, 1)
	require.NotEqual(t, name, disruption.ReplacementName(old, 2), "each attempt its own name")
	require.Equal(t, name, disruption.ReplacementName(old, 1), "an attempt's name is stable")
	require.NotEqual(t, old.Name, name)
	for range 2 {
		require.NoError(t, p.Replace(ctx, old, disruption.Replacement{Name: name, Labels: map[string]string{"atoll.dev/version": "v2"}}))
	}

	_, err = cs.CoreV1().Nodes().Get(ctx, old.Name, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "old node deleted, got %v", err)
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: disruption.LabelPool + "=" + pool})
	require.NoError(t, err)
	require.Len(t, list.Items, 1, "one node in the pool after two calls")
	r := list.Items[0]
	require.Equal(t, name, r.Name)
	require.Equal(t, pool, r.Labels[disruption.LabelPool])
	require.Equal(t, c.Zone, r.Labels[testenv.LabelZone])
	require.Equal(t, "v2", r.Labels["atoll.dev/version"])
	require.Equal(t, name, r.Labels["kubernetes.io/hostname"])
	require.Equal(t, old.Name, r.Labels[disruption.LabelReplaces])
	require.Equal(t, "fake", r.Annotations[disruption.AnnoKWOKNode])
	require.NotContains(t, r.Annotations, "atoll.dev/cordoned-by")
	require.False(t, r.Spec.Unschedulable)
	require.Equal(t, old.Status.Capacity, r.Status.Capacity)

	// KWOK makes the replacement Ready, and it keeps the pool's own taint
	// only.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		r, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if !assert.NoError(ct, err) {
			return
		}
		assert.True(ct, isReady(r), "replacement Ready")
		assert.Equal(ct, []corev1.Taint{gpu}, r.Spec.Taints)
	}, time.Minute, 200*time.Millisecond)
}
