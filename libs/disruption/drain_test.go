package disruption_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/disruption"
	"atoll.dev/libs/testenv"
)

// hold is a finalizer that keeps a deleted pod terminating (KWOK's
// simulated kubelet deletes a terminating pod at once otherwise).
const hold = "atoll.dev/test-hold"

// pod is a pod bound to node (no scheduler involved), which KWOK runs.
func pod(ns, name, node string, labels map[string]string, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27"}},
		},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

func createPod(t *testing.T, cs kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	require.NoError(t, err, "create pod %s", p.Name)
	return out
}

func names(refs []disruption.PodRef) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.Name
	}
	return out
}

// TestDrainPass drains a node of a real member cluster through the
// Eviction API: DaemonSet and mirror pods are skipped, a terminating pod is
// counted and not evicted again, the API server's 429 is reported with the
// PodDisruptionBudget that blocks the pod, a pod without budget is evicted
// (and goes), and pods of other nodes are not touched. A second pass does
// not evict again a pod listed in DrainOptions.Skip.
func TestDrainPass(t *testing.T) {
	c := member(t)
	cs := c.Client
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	nodes, err := c.AddNodes(ctx, testenv.NodePool{Name: unique("drain"), Count: 2})
	require.NoError(t, err)
	n1, n2 := nodes[0], nodes[1]
	ns := unique("drain")
	namespace(t, cs, ns)
	web := map[string]string{"app": "web"}

	// minAvailable as a count: a percentage needs the pods' controller's
	// scale, and these pods have no controller.
	_, err = cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: web}, MinAvailable: ptr.To(intstr.FromInt32(1))},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	agent := map[string]string{"app": "agent"}
	_, err = cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: agent},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: agent},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/hostname": n1},
					Containers:   []corev1.Container{{Name: "agent", Image: "agent:1"}},
				},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	free := createPod(t, cs, pod(ns, "free", n1, nil))
	guarded := createPod(t, cs, pod(ns, "guarded", n1, web))
	// A mirror pod: the API server takes the annotation from a cluster
	// admin too, not only from a node's kubelet.
	static := createPod(t, cs, pod(ns, "static", n1, nil, func(p *corev1.Pod) {
		p.Annotations = map[string]string{disruption.AnnoMirror: "static"}
	}))
	going := createPod(t, cs, pod(ns, "going", n1, nil, func(p *corev1.Pod) { p.Finalizers = []string{hold} }))
	t.Cleanup(func() {
		_, _ = cs.CoreV1().Pods(ns).Patch(context.Background(), going.Name, types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	elsewhere := createPod(t, cs, pod(ns, "elsewhere", n2, nil))
	require.NoError(t, cs.CoreV1().Pods(ns).Delete(ctx, going.Name, metav1.DeleteOptions{}))

	// Wait for what the pass must find: the DaemonSet's pod on n1, the
	// budget observed by the disruption controller with its one healthy pod
	// and no disruption allowed, and "going" terminating.
	var agentPod string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if !assert.NoError(ct, err) || !assert.Len(ct, pods.Items, 1, "DaemonSet pods") {
			return
		}
		assert.Equal(ct, n1, pods.Items[0].Spec.NodeName)
		agentPod = pods.Items[0].Name
	}, time.Minute, 200*time.Millisecond)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
		if !assert.NoError(ct, err) {
			return
		}
		assert.Equal(ct, pdb.Generation, pdb.Status.ObservedGeneration)
		assert.Equal(ct, int32(1), pdb.Status.ExpectedPods)
		assert.Equal(ct, int32(1), pdb.Status.CurrentHealthy)
		assert.Equal(ct, int32(0), pdb.Status.DisruptionsAllowed)
	}, time.Minute, 200*time.Millisecond)
	g, err := cs.CoreV1().Pods(ns).Get(ctx, going.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, g.DeletionTimestamp, "going is terminating")

	res, err := disruption.Drain(ctx, cs, n1, disruption.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"free"}, names(res.Evicted))
	require.Empty(t, res.Deleted)
	require.Equal(t, 2, res.Skipped, "DaemonSet and mirror pods")
	require.Equal(t, 1, res.Terminating)
	require.Len(t, res.Blocked, 1)
	require.Equal(t, "guarded", res.Blocked[0].Pod.Name)
	require.Equal(t, string(guarded.UID), res.Blocked[0].Pod.UID)
	require.Equal(t, ns+"/web", res.Blocked[0].PDB)
	require.Contains(t, res.Blocked[0].Message, "disruption budget")
	require.Empty(t, res.Failed)
	require.False(t, res.Done())

	// The eviction was real: "free" goes (KWOK's kubelet confirms it);
	// the pods skipped, blocked or on another node are left running.
	require.Eventually(t, func() bool {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, free.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, time.Minute, 200*time.Millisecond, "evicted pod deleted")
	for _, name := range []string{guarded.Name, static.Name, agentPod, elsewhere.Name} {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err, name)
		require.Nil(t, p.DeletionTimestamp, "%s not evicted", name)
	}

	// A later pass does not evict again a pod an earlier pass (perhaps of
	// another replica) evicted: DrainOptions.Skip counts it as terminating.
	late := createPod(t, cs, pod(ns, "late", n1, nil))
	res, err = disruption.Drain(ctx, cs, n1, disruption.DrainOptions{Skip: map[string]bool{string(late.UID): true}})
	require.NoError(t, err)
	require.Empty(t, res.Evicted)
	require.Equal(t, 2, res.Terminating, "going and late")
	require.Equal(t, 2, res.Skipped)
	require.Len(t, res.Blocked, 1)
	p, err := cs.CoreV1().Pods(ns).Get(ctx, late.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Nil(t, p.DeletionTimestamp, "late not evicted")
}
