package disruption_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/disruption"
)

func pod(name string, labels map[string]string, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-ns-" + name), Labels: labels},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

// TestDrainPass: DaemonSet and mirror pods are skipped, terminating pods
// counted and not evicted again, a 429 names the blocking budget, and the
// rest is evicted through the Eviction API.
func TestDrainPass(t *testing.T) {
	web := map[string]string{"app": "web"}
	objs := []runtime.Object{
		pod("free", nil),
		pod("guarded", web),
		pod("agent", nil, func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", Controller: ptr.To(true)}}
		}),
		pod("static", nil, func(p *corev1.Pod) { p.Annotations = map[string]string{disruption.AnnoMirror: "x"} }),
		pod("going", nil, func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) }),
		pod("elsewhere", nil, func(p *corev1.Pod) { p.Spec.NodeName = "n2" }),
		&policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: web}, MinAvailable: ptr.To(intstr.FromString("100%"))},
		},
	}
	cs := fake.NewClientset(objs...)
	var evicted []string
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if ev.Name == "guarded" {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		evicted = append(evicted, ev.Name)
		return true, nil, nil
	})
	// The fake clientset ignores field selectors: filter by node here.
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var out corev1.PodList
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName == "n1" {
				out.Items = append(out.Items, *p)
			}
		}
		return true, &out, nil
	})
	res, err := disruption.Drain(context.Background(), cs, "n1", disruption.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"free"}, evicted)
	require.Equal(t, 2, res.Skipped, "DaemonSet and mirror pods")
	require.Equal(t, 1, res.Terminating)
	require.Len(t, res.Blocked, 1)
	require.Equal(t, "guarded", res.Blocked[0].Pod.Name)
	require.Equal(t, "ns/web", res.Blocked[0].PDB)
	require.False(t, res.Done())

	// An evicted pod is not evicted again by a later pass.
	evicted = nil
	_, err = disruption.Drain(context.Background(), cs, "n1", disruption.DrainOptions{Skip: map[string]bool{"uid-ns-free": true}})
	require.NoError(t, err)
	require.Empty(t, evicted)
}
